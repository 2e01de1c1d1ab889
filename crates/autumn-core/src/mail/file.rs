//! The file transport, for development: each mail written to a folder as
//! `.eml` (for a mail program) and `.json` (for the preview page).

use std::path::{Path, PathBuf};

use super::OutgoingMail;
use super::transport::{MailTransport, SendError, SendFuture};

/// Writes each mail under `dir`.
#[derive(Debug, Clone)]
pub(crate) struct FileTransport {
    dir: PathBuf,
}

impl FileTransport {
    pub(crate) fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// The file name a mail is kept under: from its `Message-ID`, so a second
/// send of the same mail writes the same files again rather than a copy.
pub(crate) fn stem(mail: &OutgoingMail) -> String {
    mail.message_id()
        .trim_matches(['<', '>'])
        .split('@')
        .next()
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

impl MailTransport for FileTransport {
    fn send<'a>(&'a self, mail: &'a OutgoingMail) -> SendFuture<'a> {
        Box::pin(async move {
            let eml = mail
                .to_lettre()
                .map_err(|error| SendError::Permanent(error.to_string()))?
                .formatted();
            let json = serde_json::to_vec_pretty(mail)
                .map_err(|error| SendError::Permanent(error.to_string()))?;
            let dir = self.dir.clone();
            let stem = stem(mail);
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join(format!("{stem}.eml")), eml)?;
                // The listing reads the JSON: written last, so a mail is
                // listed only once both files are there.
                std::fs::write(dir.join(format!("{stem}.json")), json)
            })
            .await
            .map_err(|error| SendError::Transient(error.to_string()))?
            .map_err(|error| {
                SendError::Transient(format!("cannot write to {}: {error}", self.dir.display()))
            })
        })
    }

    fn name(&self) -> &'static str {
        "file"
    }
}

/// The mails written under `dir`, newest first.
pub(crate) fn list(dir: &Path) -> Vec<OutgoingMail> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut mails: Vec<OutgoingMail> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .filter_map(|path| std::fs::read(path).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect();
    mails.sort_by_key(|mail| std::cmp::Reverse(mail.queued_at));
    mails
}

/// The mail kept under `stem` in `dir`.
pub(crate) fn find(dir: &Path, stem: &str) -> Option<OutgoingMail> {
    if stem.is_empty() || !stem.chars().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    let bytes = std::fs::read(dir.join(format!("{stem}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

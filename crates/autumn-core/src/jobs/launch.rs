//! [`AppBuilder::with_commit_hooks`]: the app's after-commit hooks, run by a
//! worker launch starts.

use super::CommitHooks;
use crate::AppBuilder;

impl AppBuilder {
    /// Runs `hooks` for the rows of `autumn_commit_jobs`: launch starts a
    /// worker in this process when `[database] url` is set. Called more than
    /// once, the hooks add up (the last call's retry settings win).
    ///
    /// ```
    /// use autumn_core::jobs::{CommitHooks, CommitJob, JobError};
    ///
    /// async fn welcome(_job: CommitJob) -> Result<(), JobError> { Ok(()) }
    ///
    /// let app = autumn_core::app()
    ///     .with_commit_hooks(CommitHooks::new().hook("users.after_create_commit", welcome));
    /// # let _ = app;
    /// ```
    pub fn with_commit_hooks(mut self, hooks: CommitHooks) -> Self {
        self.commit_hooks = Some(match self.commit_hooks.take() {
            Some(before) => {
                let settings = hooks.settings;
                let mut merged = before.merge(hooks);
                merged.settings = settings;
                merged
            }
            None => hooks,
        });
        self
    }
}

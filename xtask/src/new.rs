//! `cargo xtask new NAME [--path DIR] [--git URL]`: writes a runnable app.
//!
//! The files are `examples/starter`'s, a member of this workspace (so CI
//! builds and tests the template like any other app), with its name and
//! its path to `autumn-web` replaced by the new app's.

use std::env;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The template's files: their path in the app, and their text as
/// `examples/starter` has it.
const TEMPLATE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../examples/starter/Cargo.toml"),
    ),
    (
        "autumn.toml",
        include_str!("../../examples/starter/autumn.toml"),
    ),
    (
        ".gitignore",
        include_str!("../../examples/starter/.gitignore"),
    ),
    (
        "src/lib.rs",
        include_str!("../../examples/starter/src/lib.rs"),
    ),
    (
        "src/main.rs",
        include_str!("../../examples/starter/src/main.rs"),
    ),
    (
        "tests/app.rs",
        include_str!("../../examples/starter/tests/app.rs"),
    ),
];

/// What `examples/starter` says that names itself, and what it depends on.
const EXAMPLE_NAME: &str = "name = \"starter\"";
const EXAMPLE_CRATE: &str = "starter::";
const EXAMPLE_DEPENDENCY: &str = "{ path = \"../../crates/autumn-web\" }";

pub(crate) const USAGE: &str = "\
usage: cargo xtask new NAME [--path DIR] [--git URL]

  Writes a runnable Autumn app named NAME: a page, a form guarded by a
  submit token, a JSON API, a test and an autumn.toml.

  --path DIR  where to create it (default: NAME next to this repository);
              DIR must not exist or be empty
  --git URL   depend on autumn-web from this git repository instead of
              by a path relative to DIR";

/// Where the app gets `autumn-web` from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A path dependency, relative to the app's directory.
    Path(String),
    /// A git dependency.
    Git(String),
}

impl Source {
    /// The value of `autumn-web = ...` in the app's Cargo.toml.
    fn dependency(&self) -> String {
        match self {
            Self::Path(path) => format!("{{ path = {} }}", toml_string(path)),
            Self::Git(url) => format!("{{ git = {} }}", toml_string(url)),
        }
    }
}

/// Runs `cargo xtask new` with the arguments after `new`.
pub(crate) fn run(root: &Path, args: &[String]) -> Result<(), String> {
    let mut name = None;
    let mut dir = None;
    let mut git = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--path" => dir = Some(PathBuf::from(value(&mut args, "--path")?)),
            "--git" => git = Some(value(&mut args, "--git")?.to_owned()),
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            flag if flag.starts_with('-') => {
                return Err(format!("unknown option `{flag}`\n\n{USAGE}"));
            }
            other if name.is_none() => name = Some(other.to_owned()),
            other => return Err(format!("unexpected argument `{other}`\n\n{USAGE}")),
        }
    }
    let Some(name) = name else {
        return Err(format!("the app needs a name\n\n{USAGE}"));
    };
    check_name(&name)?;

    let cwd = env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let root = normalize(&cwd.join(root));
    let dir = match dir {
        Some(dir) => normalize(&cwd.join(dir)),
        // Next to the clone, so that the path dependency is
        // `../<clone>/crates/autumn-web`, the layout the README describes.
        None => match root.parent() {
            Some(parent) => parent.join(&name),
            None => cwd.join(&name),
        },
    };
    let source = match git {
        Some(url) => Source::Git(url),
        None => Source::Path(relative(&dir, &root.join("crates/autumn-web"))),
    };

    if fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!(
            "{} already exists and is not empty; pick another --path",
            dir.display()
        ));
    }
    for (path, text) in render(&name, &source) {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }

    println!("created {} in {}", name, dir.display());
    if dir.starts_with(&root) {
        println!(
            "it is inside the Autumn workspace: add its path to `members` in {}",
            root.join("Cargo.toml").display()
        );
    }
    println!(
        "\n  cd {}\n  cargo test\n  cargo run    # then open http://127.0.0.1:3000/",
        dir.display()
    );
    Ok(())
}

fn value<'a>(args: &mut impl Iterator<Item = &'a String>, flag: &str) -> Result<&'a str, String> {
    args.next()
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value\n\n{USAGE}"))
}

/// A name cargo takes for a package whose library is then `crate_name`.
fn check_name(name: &str) -> Result<(), String> {
    let starts_with_letter = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let allowed = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if starts_with_letter && allowed {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a package name: use letters, digits, `-` and `_`, starting with a letter"
        ))
    }
}

/// The template's files for an app called `name`.
fn render(name: &str, source: &Source) -> Vec<(&'static str, String)> {
    let crate_name = name.replace('-', "_");
    let dependency = source.dependency();
    TEMPLATE
        .iter()
        .map(|(path, text)| {
            let text = text
                .replace(EXAMPLE_NAME, &format!("name = {}", toml_string(name)))
                .replace(EXAMPLE_CRATE, &format!("{crate_name}::"))
                .replace(EXAMPLE_DEPENDENCY, &dependency);
            (*path, text)
        })
        .collect()
}

/// `path` with `.` and `..` resolved by its text, so that a directory that
/// does not exist yet can be compared with one that does.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// `to` as a path relative to the directory `from` (both absolute and
/// normalized), with `/` between parts, as Cargo.toml takes it on every
/// system. Falls back to `to` itself when they share no root.
fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<_> = from.components().collect();
    let to_parts: Vec<_> = to.components().collect();
    if from.first() != to_parts.first() {
        return to.display().to_string();
    }
    let common = from
        .iter()
        .zip(&to_parts)
        .take_while(|(a, b)| a == b)
        .count();
    let ups = std::iter::repeat_n("..".to_owned(), from.len() - common);
    let downs = to_parts[common..]
        .iter()
        .map(|part| part.as_os_str().to_string_lossy().into_owned());
    let parts: Vec<String> = ups.chain(downs).collect();
    if parts.is_empty() {
        ".".to_owned()
    } else {
        parts.join("/")
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_root() -> PathBuf {
        crate::repo_root()
    }

    /// `examples/starter` is what `cargo xtask new starter --path
    /// examples/starter` writes, file for file, and has no other files.
    #[test]
    fn examples_starter_is_the_template_rendered() {
        let root = repo_root();
        let starter = root.join("examples/starter");
        let source = Source::Path(relative(&starter, &root.join("crates/autumn-web")));
        assert_eq!(source, Source::Path("../../crates/autumn-web".to_owned()));

        for (path, expected) in render("starter", &source) {
            let actual = fs::read_to_string(starter.join(path))
                .unwrap_or_else(|e| panic!("examples/starter/{path}: {e}"));
            assert_eq!(
                actual, expected,
                "examples/starter/{path} is not what rendering it for `starter` gives: \
                 a name or a dependency path the renderer does not know"
            );
        }

        let mut on_disk = Vec::new();
        list_files(&starter, &starter, &mut on_disk);
        on_disk.sort();
        let mut templated: Vec<String> = TEMPLATE.iter().map(|(p, _)| (*p).to_owned()).collect();
        templated.sort();
        assert_eq!(
            on_disk, templated,
            "examples/starter has files the template lacks"
        );
    }

    fn list_files(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in fs::read_dir(dir).expect("a readable directory") {
            let path = entry.expect("a directory entry").path();
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if path.is_dir() {
                list_files(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).expect("under base");
                let parts: Vec<_> = rel
                    .components()
                    .map(|part| part.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push(parts.join("/"));
            }
        }
    }

    #[test]
    fn another_name_replaces_every_placeholder() {
        let source = Source::Git("https://example.com/autumn.git".to_owned());
        let files = render("my-blog", &source);
        for (path, text) in &files {
            assert!(!text.contains("{{"), "{path} keeps a placeholder");
            assert!(!text.contains("starter"), "{path} names the example");
        }
        let text_of = |wanted: &str| {
            files
                .iter()
                .find(|(path, _)| *path == wanted)
                .map(|(_, text)| text.clone())
                .expect("a rendered file")
        };
        let manifest = text_of("Cargo.toml");
        assert!(manifest.contains("name = \"my-blog\""));
        assert!(manifest.contains("autumn-web = { git = \"https://example.com/autumn.git\" }"));
        assert!(text_of("src/main.rs").contains("my_blog::app()"));
        assert!(text_of("tests/app.rs").contains("use my_blog::{"));
    }

    #[test]
    fn the_path_dependency_is_relative_to_the_app() {
        let autumn = Path::new("/home/ada/src/autumn/crates/autumn-web");
        let cases = [
            ("/home/ada/src/blog", "../autumn/crates/autumn-web"),
            ("/home/ada/apps/shop", "../../src/autumn/crates/autumn-web"),
            (
                "/home/ada/src/autumn/examples/starter",
                "../../crates/autumn-web",
            ),
        ];
        for (app, expected) in cases {
            assert_eq!(relative(Path::new(app), autumn), expected, "app at {app}");
        }
        assert_eq!(
            normalize(Path::new("/home/ada/src/autumn/./xtask/../../blog")),
            Path::new("/home/ada/src/blog")
        );
    }

    #[test]
    fn names_cargo_refuses_are_refused() {
        for bad in ["", "1app", "my app", "app/../x", "-x", "café"] {
            assert!(check_name(bad).is_err(), "`{bad}` was taken");
        }
        for good in ["blog", "my-blog", "my_blog2"] {
            assert!(check_name(good).is_ok(), "`{good}` was refused");
        }
    }

    #[test]
    fn toml_strings_are_escaped() {
        assert_eq!(toml_string(r#"C:\src\"x""#), r#""C:\\src\\\"x\"""#);
    }

    #[test]
    fn a_new_app_is_written_and_an_existing_directory_is_kept() {
        let dir = env::temp_dir().join(format!("autumn-xtask-new-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let app = dir.join("notes");
        let root = repo_root();
        let args = ["notes", "--path"].map(str::to_owned);
        let mut args = args.to_vec();
        args.push(app.display().to_string());

        run(&root, &args).expect("a new app");
        let manifest = fs::read_to_string(app.join("Cargo.toml")).expect("Cargo.toml");
        let expected = relative(&app, &normalize(&root.join("crates/autumn-web")));
        assert!(manifest.contains(&format!("autumn-web = {{ path = \"{expected}\" }}")));
        assert!(app.join("tests/app.rs").is_file());
        assert!(app.join("autumn.toml").is_file());

        fs::write(app.join("src/lib.rs"), "// mine").expect("an edit");
        let again = run(&root, &args);
        assert!(again.is_err_and(|e| e.contains("not empty")));
        assert_eq!(
            fs::read_to_string(app.join("src/lib.rs")).ok().as_deref(),
            Some("// mine")
        );
        let _ = fs::remove_dir_all(&dir);
    }
}

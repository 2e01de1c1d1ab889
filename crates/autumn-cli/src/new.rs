//! `autumn new NAME [--db ...] [--idempotency ...] [--path DIR] [--git URL]`
//! (also `cargo xtask new`): writes a runnable app.
//!
//! The files are `examples/starter`'s, a member of this workspace (so CI
//! builds and tests the template like any other app), with its name and
//! its path to `autumn-web` replaced by the new app's, and the features and
//! `autumn.toml` sections of the database and idempotency store asked for.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The template's files: their path in the app, and their text as
/// `examples/starter` has it.
const TEMPLATE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../../examples/starter/Cargo.toml"),
    ),
    (
        "autumn.toml",
        include_str!("../../../examples/starter/autumn.toml"),
    ),
    (
        ".gitignore",
        include_str!("../../../examples/starter/.gitignore"),
    ),
    (
        "src/lib.rs",
        include_str!("../../../examples/starter/src/lib.rs"),
    ),
    (
        "src/main.rs",
        include_str!("../../../examples/starter/src/main.rs"),
    ),
    (
        "tests/app.rs",
        include_str!("../../../examples/starter/tests/app.rs"),
    ),
];

/// What `examples/starter` says that names itself, and what it depends on.
const EXAMPLE_NAME: &str = "name = \"starter\"";
const EXAMPLE_CRATE: &str = "starter::";
const EXAMPLE_DEPENDENCY: &str = "{ path = \"../../crates/autumn-web\" }";

/// What `autumn new --help` prints.
pub const USAGE: &str = "\
usage: autumn new NAME [--db none|sqlite|postgres]
                  [--idempotency memory|redis|database] [--path DIR] [--git URL]

  Writes a runnable Autumn app named NAME: a page, a form guarded by a
  submit token, a JSON API, a test and an autumn.toml.

  --db DB            the app database: none (the default), sqlite (a file
                     next to the app) or postgres (127.0.0.1:5432)
  --idempotency ST   where idempotency keys and submit tokens live: memory
                     (the default, one process), redis (127.0.0.1:6379) or
                     database (needs --db)
  --path DIR         where to create it (default: NAME in the current
                     directory); DIR must not exist or be empty
  --git URL          depend on autumn-web from this git repository instead
                     of by a path to the copy this command was built from";

/// Where apps go and where `autumn-web` is, unless the command line says.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// The `autumn-web` crate a path dependency points at.
    pub autumn_web: PathBuf,
    /// The directory an app called NAME is created in, as `DIR/NAME`.
    pub parent: PathBuf,
}

impl Defaults {
    /// For the installed command: the `autumn-web` beside the sources it
    /// was built from, apps in the current directory.
    pub fn installed() -> Self {
        let cli = Path::new(env!("CARGO_MANIFEST_DIR"));
        Self {
            autumn_web: normalize(&cli.join("../autumn-web")),
            parent: env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        }
    }

    /// For `cargo xtask new` in the clone at `root`: apps next to the
    /// clone, so the path dependency is `../<clone>/crates/autumn-web`.
    pub fn in_clone(root: &Path) -> Self {
        let cwd = env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let root = normalize(&cwd.join(root));
        Self {
            autumn_web: root.join("crates/autumn-web"),
            parent: root.parent().map_or(cwd, Path::to_path_buf),
        }
    }
}

/// The app database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    /// None: notes in memory, as the template has them.
    None,
    /// A SQLite file next to the app.
    Sqlite,
    /// PostgreSQL on this machine.
    Postgres,
}

/// Where keys and submit tokens live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// In the process.
    Memory,
    /// On Redis, shared by replicas.
    Redis,
    /// In the app database, committed with the app's writes.
    Database,
}

/// What the app is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// The app database.
    pub database: Database,
    /// The idempotency store.
    pub store: Store,
}

impl Default for Choices {
    fn default() -> Self {
        Self {
            database: Database::None,
            store: Store::Memory,
        }
    }
}

/// Where the app gets `autumn-web` from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A path dependency, relative to the app's directory.
    Path(String),
    /// A git dependency.
    Git(String),
}

impl Source {
    /// The value of `autumn-web = ...` in the app's Cargo.toml, with
    /// `features`.
    fn dependency(&self, features: &[&str]) -> String {
        let features = if features.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = features.iter().map(|f| toml_string(f)).collect();
            format!(", features = [{}]", list.join(", "))
        };
        match self {
            Self::Path(path) => format!("{{ path = {}{features} }}", toml_string(path)),
            Self::Git(url) => format!("{{ git = {}{features} }}", toml_string(url)),
        }
    }
}

/// Runs `autumn new` with the arguments after `new`.
///
/// # Errors
///
/// The one line to print: a bad argument, a name cargo refuses, a
/// directory that is not empty, a file that cannot be written.
pub fn run(defaults: &Defaults, args: &[String]) -> Result<(), String> {
    let mut name = None;
    let mut dir = None;
    let mut git = None;
    let mut choices = Choices::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--path" => dir = Some(PathBuf::from(value(&mut args, "--path")?)),
            "--git" => git = Some(value(&mut args, "--git")?.to_owned()),
            "--db" => {
                choices.database = match value(&mut args, "--db")? {
                    "none" => Database::None,
                    "sqlite" => Database::Sqlite,
                    "postgres" => Database::Postgres,
                    other => {
                        return Err(format!(
                            "--db takes none, sqlite or postgres, not `{other}`\n\n{USAGE}"
                        ));
                    }
                }
            }
            "--idempotency" => {
                choices.store = match value(&mut args, "--idempotency")? {
                    "memory" => Store::Memory,
                    "redis" => Store::Redis,
                    "database" => Store::Database,
                    other => {
                        return Err(format!(
                            "--idempotency takes memory, redis or database, not `{other}`\n\n{USAGE}"
                        ));
                    }
                }
            }
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
    if choices.store == Store::Database && choices.database == Database::None {
        return Err("--idempotency database needs --db sqlite or --db postgres".to_owned());
    }

    let cwd = env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let dir = match dir {
        Some(dir) => normalize(&cwd.join(dir)),
        None => defaults.parent.join(&name),
    };
    let source = match git {
        Some(url) => Source::Git(url),
        None => {
            if !defaults.autumn_web.join("Cargo.toml").is_file() {
                return Err(format!(
                    "{} is not there any more: pass --git URL (or --path inside a clone)",
                    defaults.autumn_web.display()
                ));
            }
            Source::Path(relative(&dir, &defaults.autumn_web))
        }
    };

    if fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!(
            "{} already exists and is not empty; pick another --path",
            dir.display()
        ));
    }
    for (path, text) in render_with(&name, &source, choices) {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }

    println!("created {} in {}", name, dir.display());
    if let Some(workspace) = defaults.autumn_web.parent().and_then(Path::parent)
        && dir.starts_with(workspace)
    {
        println!(
            "it is inside the Autumn workspace: add its path to `members` in {}",
            workspace.join("Cargo.toml").display()
        );
    }
    if choices.database == Database::Postgres {
        println!(
            "\n  createdb -h 127.0.0.1 -U postgres {}",
            name.replace('-', "_")
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

/// The template's files for an app called `name`, as `examples/starter`
/// has them (no database, keys in memory).
#[cfg(test)]
fn render(name: &str, source: &Source) -> Vec<(&'static str, String)> {
    render_with(name, source, Choices::default())
}

/// The template's files for an app called `name` made with `choices`.
fn render_with(name: &str, source: &Source, choices: Choices) -> Vec<(&'static str, String)> {
    let crate_name = name.replace('-', "_");
    let mut features = Vec::new();
    match choices.database {
        Database::None => {}
        Database::Sqlite => features.push("sqlite"),
        Database::Postgres => features.push("postgres"),
    }
    if choices.store == Store::Redis {
        features.push("redis");
    }
    let dependency = source.dependency(&features);
    TEMPLATE
        .iter()
        .map(|(path, text)| {
            let mut text = text
                .replace(EXAMPLE_NAME, &format!("name = {}", toml_string(name)))
                .replace(EXAMPLE_CRATE, &format!("{crate_name}::"))
                .replace(EXAMPLE_DEPENDENCY, &dependency);
            if *path == "autumn.toml" {
                text = configured(&text, &crate_name, choices);
            } else if *path == ".gitignore" && choices.database == Database::Sqlite {
                text.push_str("/*.db*\n");
            }
            (*path, text)
        })
        .collect()
}

/// The template's `autumn.toml` with the store and database `choices` name.
fn configured(text: &str, crate_name: &str, choices: Choices) -> String {
    let backend = match choices.store {
        Store::Memory => "memory",
        Store::Redis => "redis",
        Store::Database => "database",
    };
    let mut text = text.replace(
        "backend = \"memory\"",
        &format!("backend = {}", toml_string(backend)),
    );
    if choices.store == Store::Redis {
        text.push_str("\n[idempotency.redis]\nurl = \"redis://127.0.0.1:6379\"\n");
    }
    match choices.database {
        Database::None => {}
        Database::Sqlite => {
            let _ = write!(
                text,
                "\n[database]\n# A SQLite file in the working directory.\nurl = {}\n",
                toml_string(&format!("sqlite://{crate_name}.db"))
            );
        }
        Database::Postgres => {
            let _ = write!(
                text,
                "\n[database]\n# Made with `createdb {crate_name}`; set AUTUMN_DATABASE__URL elsewhere.\nurl = {}\n",
                toml_string(&format!("postgres://postgres@127.0.0.1:5432/{crate_name}"))
            );
        }
    }
    text
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
        normalize(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
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
        let dir = env::temp_dir().join(format!("autumn-cli-new-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let app = dir.join("notes");
        let root = repo_root();
        let args = ["notes", "--path"].map(str::to_owned);
        let mut args = args.to_vec();
        args.push(app.display().to_string());

        let defaults = Defaults::in_clone(&root);
        run(&defaults, &args).expect("a new app");
        let manifest = fs::read_to_string(app.join("Cargo.toml")).expect("Cargo.toml");
        let expected = relative(&app, &normalize(&root.join("crates/autumn-web")));
        assert!(manifest.contains(&format!("autumn-web = {{ path = \"{expected}\" }}")));
        assert!(app.join("tests/app.rs").is_file());
        assert!(app.join("autumn.toml").is_file());

        fs::write(app.join("src/lib.rs"), "// mine").expect("an edit");
        let again = run(&defaults, &args);
        assert!(again.is_err_and(|e| e.contains("not empty")));
        assert_eq!(
            fs::read_to_string(app.join("src/lib.rs")).ok().as_deref(),
            Some("// mine")
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_database_and_a_store_bring_their_features_and_configuration() {
        let source = Source::Path("../autumn/crates/autumn-web".to_owned());
        let text_of = |files: &[(&str, String)], wanted: &str| {
            files
                .iter()
                .find(|(path, _)| *path == wanted)
                .map(|(_, text)| text.clone())
                .expect("a rendered file")
        };
        let sqlite = render_with(
            "my-shop",
            &source,
            Choices {
                database: Database::Sqlite,
                store: Store::Database,
            },
        );
        assert!(text_of(&sqlite, "Cargo.toml").contains(
            "autumn-web = { path = \"../autumn/crates/autumn-web\", features = [\"sqlite\"] }"
        ));
        let config = text_of(&sqlite, "autumn.toml");
        assert!(config.contains("backend = \"database\""), "{config}");
        assert!(config.contains("[database]"), "{config}");
        assert!(config.contains("url = \"sqlite://my_shop.db\""), "{config}");
        assert!(text_of(&sqlite, ".gitignore").contains("/*.db"));

        let postgres = render_with(
            "shop",
            &source,
            Choices {
                database: Database::Postgres,
                store: Store::Redis,
            },
        );
        assert!(text_of(&postgres, "Cargo.toml").contains("features = [\"postgres\", \"redis\"]"));
        let config = text_of(&postgres, "autumn.toml");
        assert!(config.contains("backend = \"redis\""), "{config}");
        assert!(config.contains("[idempotency.redis]"), "{config}");
        assert!(
            config.contains("url = \"postgres://postgres@127.0.0.1:5432/shop\""),
            "{config}"
        );
    }

    /// Every combination's `autumn.toml` loads with the framework's own
    /// loader (unknown keys and bad values are errors there) to what was
    /// asked for.
    #[test]
    fn every_rendered_configuration_loads_as_asked() {
        use autumn_core::config::{AutumnConfig, Backend};
        let source = Source::Git("https://example.com/autumn.git".to_owned());
        for database in [Database::None, Database::Sqlite, Database::Postgres] {
            for store in [Store::Memory, Store::Redis, Store::Database] {
                if store == Store::Database && database == Database::None {
                    continue;
                }
                let files = render_with("shop", &source, Choices { database, store });
                let text = files
                    .iter()
                    .find(|(path, _)| *path == "autumn.toml")
                    .map(|(_, text)| text.as_str())
                    .expect("an autumn.toml");
                let config = AutumnConfig::from_toml_str(text)
                    .unwrap_or_else(|error| panic!("{database:?}/{store:?}: {error}\n{text}"));
                let backend = match store {
                    Store::Memory => Backend::Memory,
                    Store::Redis => Backend::Redis,
                    Store::Database => Backend::Database,
                };
                assert_eq!(config.idempotency.backend, backend, "{text}");
                let url = config.database.url.unwrap_or_default();
                match database {
                    Database::None => assert!(url.is_empty(), "{text}"),
                    Database::Sqlite => assert_eq!(url, "sqlite://shop.db"),
                    Database::Postgres => assert!(url.starts_with("postgres://"), "{url}"),
                }
            }
        }
    }

    #[test]
    fn keys_in_the_database_need_a_database() {
        let defaults = Defaults::in_clone(&repo_root());
        let args = ["shop", "--idempotency", "database"].map(str::to_owned);
        let error = run(&defaults, &args).expect_err("refused");
        assert!(error.contains("needs --db"), "{error}");
        let args = ["shop", "--db", "mysql"].map(str::to_owned);
        let error = run(&defaults, &args).expect_err("refused");
        assert!(
            error.contains("--db takes none, sqlite or postgres"),
            "{error}"
        );
    }
}

//! What the docs show is what the code does, where a test can tell: every
//! ```` ```toml ```` block parses, and loads through the real configuration
//! loader when it is an `autumn.toml`; every `AUTUMN_*` variable named is a
//! configuration key (or one of the few variables the loader reads that are
//! not keys); every startup error quoted (a line `autumn: ...` in a text or
//! shell block) is one the code can print.
//!
//! Each failure names the file and line to fix and what is wrong there.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use autumn_web::LaunchError;
use autumn_web::config::{AutumnConfig, ConfigError};

// ---- the files ------------------------------------------------------------------------------

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate sits two levels below the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("list {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    entries
}

/// A file as (its path from the workspace root, its text).
fn file(path: &Path) -> (String, String) {
    let name = path
        .strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string();
    (name, read(path))
}

/// README.md, docs/*.md and examples/*/README.md.
fn doc_files() -> Vec<(String, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    paths.extend(
        sorted_entries(&root.join("docs"))
            .into_iter()
            .filter(|path| path.extension().is_some_and(|ext| ext == "md")),
    );
    paths.extend(
        sorted_entries(&root.join("examples"))
            .into_iter()
            .map(|dir| dir.join("README.md"))
            .filter(|path| path.is_file()),
    );
    paths.iter().map(|path| file(path)).collect()
}

// ---- fenced blocks --------------------------------------------------------------------------

/// A fenced code block of a Markdown file.
struct Block {
    /// The info string's first word (`toml`, `text`, `sh`), empty for none.
    lang: String,
    /// The line of the opening fence, from 1.
    fence_line: usize,
    /// The nearest non-blank line above the fence, trimmed: where a marker
    /// such as [`NOT_AUTUMN_TOML`] goes.
    above: String,
    /// The lines inside the fences, each with its line number.
    lines: Vec<(usize, String)>,
}

impl Block {
    fn text(&self) -> String {
        self.lines
            .iter()
            .map(|(_, line)| format!("{line}\n"))
            .collect()
    }
}

fn blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(Block, usize)> = None;
    let mut above = String::new();
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let closes = trimmed.starts_with("```") && trimmed.trim_end().chars().all(|c| c == '`');
        if let Some((block, fence_indent)) = open.as_mut() {
            if !closes {
                let cut = indent.min(*fence_indent);
                block.lines.push((number, line[cut..].to_owned()));
                continue;
            }
            blocks.extend(open.take().map(|(block, _)| block));
            "```".clone_into(&mut above);
        } else if let Some(info) = trimmed.strip_prefix("```") {
            let lang = info
                .split([',', ' ', '{'])
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            let block = Block {
                lang,
                fence_line: number,
                above: above.clone(),
                lines: Vec::new(),
            };
            open = Some((block, indent));
        } else if !trimmed.is_empty() {
            trimmed.clone_into(&mut above);
        }
    }
    blocks.extend(open.map(|(block, _)| block));
    blocks
}

// ---- ```toml blocks ---------------------------------------------------------------------------

/// The line above a ```` ```toml ```` block that is deliberately not an
/// `autumn.toml`, such as one showing a refused value: the block must still
/// be valid TOML, but is not loaded. Prefer a ```` ```text ```` block.
const NOT_AUTUMN_TOML: &str = "<!-- not autumn.toml -->";

/// The tables of a Cargo manifest. A block whose tables are all among these is
/// a Cargo.toml snippet, not an `autumn.toml` (whose sections are none of
/// these).
const CARGO_TABLES: &[&str] = &[
    "package",
    "lib",
    "bin",
    "example",
    "test",
    "bench",
    "dependencies",
    "dev-dependencies",
    "build-dependencies",
    "target",
    "features",
    "workspace",
    "patch",
    "replace",
    "profile",
    "badges",
    "lints",
];

/// The problems with every ```` ```toml ```` block of `markdown`, one line each.
fn toml_problems(file: &str, markdown: &str) -> Vec<String> {
    blocks(markdown)
        .iter()
        .filter(|block| block.lang == "toml")
        .filter_map(|block| check_toml_block(file, block).err())
        .collect()
}

fn check_toml_block(file: &str, block: &Block) -> Result<(), String> {
    let fence = block.fence_line;
    let text = block.text();
    let table: toml::Table = text.parse().map_err(|error: toml::de::Error| {
        let line = error.span().map_or(fence + 1, |span| {
            fence
                + 1
                + text
                    .get(..span.start)
                    .unwrap_or_default()
                    .matches('\n')
                    .count()
        });
        format!(
            "{file}:{line}: the ```toml block at line {fence} is not valid TOML: {}",
            one_line(error.message())
        )
    })?;
    let (cargo, other): (Vec<&String>, Vec<&String>) = table
        .keys()
        .partition(|key| CARGO_TABLES.contains(&key.as_str()));
    if !cargo.is_empty() {
        if other.is_empty() {
            return Ok(()); // A Cargo.toml snippet: valid TOML is all it must be.
        }
        return Err(format!(
            "{file}:{fence}: the ```toml block mixes Cargo.toml tables ({}) with other keys ({}); show Cargo.toml and autumn.toml in separate blocks",
            join(&cargo),
            join(&other)
        ));
    }
    if block.above == NOT_AUTUMN_TOML {
        return Ok(());
    }
    let (name, profile) = config_file_name(&text);
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join(&name), &text).expect("write the block to a file");
    let env: HashMap<String, String> = profile
        .iter()
        .map(|profile| ("AUTUMN_PROFILE".to_owned(), profile.clone()))
        .collect();
    AutumnConfig::load_from(dir.path(), &env)
        .map(drop)
        .map_err(|error| {
            let temp = format!("{}{}", dir.path().display(), std::path::MAIN_SEPARATOR);
            let line = error
                .key()
                .and_then(|key| line_of_key(block, key))
                .unwrap_or(fence);
            format!(
                "{file}:{line}: the ```toml block at line {fence} does not load as {name}{}: {}; if it is not an autumn.toml, put `{NOT_AUTUMN_TOML}` on the line above it",
                profile
                    .map(|profile| format!(" (AUTUMN_PROFILE={profile})"))
                    .unwrap_or_default(),
                error.to_string().replace(&temp, "")
            )
        })
}

/// The file a block is, from a first line like `# autumn-prod.toml`
/// (`autumn.toml` when it names none), and the profile such a file is for.
fn config_file_name(text: &str) -> (String, Option<String>) {
    let named = text
        .lines()
        .find(|line| !line.trim().is_empty())
        .and_then(|line| line.trim().strip_prefix('#'))
        .and_then(|comment| comment.split_whitespace().next())
        .filter(|name| name.starts_with("autumn") && name.ends_with(".toml"));
    match named {
        Some(name) => {
            let profile = name
                .strip_prefix("autumn-")
                .and_then(|rest| rest.strip_suffix(".toml"))
                .map(str::to_owned);
            (name.to_owned(), profile)
        }
        None => ("autumn.toml".to_owned(), None),
    }
}

/// The line of `key` (`idempotency.redis.url`, `a.b[0]`) in the block: the
/// line setting its last part, or the table header naming it.
fn line_of_key(block: &Block, key: &str) -> Option<usize> {
    let key = key.split('[').next().unwrap_or(key);
    let last = key.rsplit('.').next().unwrap_or(key);
    let sets = |line: &str| {
        line.trim_start()
            .strip_prefix(last)
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    };
    let header = |line: &str| line.trim() == format!("[{key}]");
    block
        .lines
        .iter()
        .rev()
        .find(|(_, line)| sets(line))
        .or_else(|| block.lines.iter().find(|(_, line)| header(line)))
        .map(|(number, _)| *number)
}

fn join(keys: &[&String]) -> String {
    keys.iter()
        .map(|key| format!("`{key}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} {what}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Asserts that `problems` are, in order, the ones `expected` describes: each
/// by how it starts (the file, line and what is wrong) and what it says.
fn assert_problems(problems: &[String], expected: &[(&str, &str)]) {
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (problem, (start, says)) in problems.iter().zip(expected) {
        assert!(
            problem.starts_with(start),
            "{problem}\nshould start with {start}"
        );
        assert!(problem.contains(says), "{problem}\nshould say {says}");
    }
}

#[test]
fn every_toml_block_in_the_docs_is_valid_toml_and_every_autumn_toml_block_loads() {
    let problems: Vec<String> = doc_files()
        .iter()
        .flat_map(|(file, text)| toml_problems(file, text))
        .collect();
    report("```toml blocks in the docs are wrong", &problems);
}

#[test]
fn the_toml_block_check_refuses_a_duplicated_key_an_unknown_key_and_a_bad_value() {
    // The `[idempotency]` block docs/idempotency.md once had, with
    // `in_flight_wait_ms` twice.
    let markdown = "\
Intro.

```toml
[idempotency]
enabled = true
in_flight_wait_ms = 0
fingerprint = \"bytes\"
in_flight_wait_ms = 0
```

```toml
# autumn.toml
[server]
prot = 8080
```

```toml
# autumn-prod.toml
[idempotency.admin]
enabled = true
```

```toml
[session]
ttl_secs = \"a day\"
```

```toml
# The app's Cargo.toml
[dependencies]
autumn-web = { path = \"../autumn/crates/autumn-web\" }
```

```toml
[dependencies]
serde = \"1\"

[server]
port = 8080
```

<!-- not autumn.toml -->
```toml
[server]
prot = 8080
```

```toml
[server]
port = 3000
```
";
    let problems = toml_problems("guide.md", markdown);
    let expected = [
        (
            "guide.md:8: the ```toml block at line 3 is not valid TOML",
            "duplicate key",
        ),
        (
            "guide.md:14: the ```toml block at line 11 does not load as autumn.toml",
            "unknown key `server.prot`",
        ),
        (
            "guide.md:17: the ```toml block at line 17 does not load as autumn-prod.toml (AUTUMN_PROFILE=prod)",
            "idempotency.admin.token",
        ),
        (
            "guide.md:25: the ```toml block at line 23 does not load as autumn.toml",
            "invalid value for `session.ttl_secs`",
        ),
        (
            "guide.md:34: the ```toml block mixes Cargo.toml tables (`dependencies`)",
            "(`server`)",
        ),
    ];
    assert_problems(&problems, &expected);
}

// ---- AUTUMN_* variables -----------------------------------------------------------------------

/// The `AUTUMN_` variables the loader reads that are not configuration keys:
/// the string constants of `crates/autumn-core/src/config/env.rs` without
/// `__`, which
/// [`the_variables_that_are_not_keys_are_the_ones_the_loader_reads`] checks.
const NOT_KEYS: &[&str] = &["AUTUMN_CONFIG", "AUTUMN_PROFILE"];

/// Names that are neither keys nor variables the loader reads, used on purpose
/// to explain the naming, and the only files that may use them.
const ILLUSTRATIONS: &[(&str, &[&str], &str)] = &[
    (
        "AUTUMN_SECTION__KEY",
        &["docs/configuration.md", "autumn.toml.example"],
        "the naming pattern itself",
    ),
    (
        "AUTUMN_FOO",
        &["docs/configuration.md"],
        "a variable without `__`, which is not a key",
    ),
    (
        "AUTUMN_SERVER_PORT",
        &["docs/configuration.md"],
        "the near miss the loader warns about",
    ),
];

/// An `AUTUMN_*` name in a file, with the value it is given there
/// (`AUTUMN_SERVER__PORT=8080`), if any.
struct Mention {
    line: usize,
    name: String,
    value: Option<String>,
}

fn mentions(text: &str) -> Vec<Mention> {
    let mut mentions = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut from = 0;
        while let Some(found) = line[from..].find("AUTUMN_") {
            let start = from + found;
            let rest = &line[start..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            from = start + len;
            let inside_a_longer_name = line[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
            if inside_a_longer_name {
                continue;
            }
            mentions.push(Mention {
                line: index + 1,
                name: rest[..len].to_owned(),
                value: rest[len..].strip_prefix('=').map(shell_word),
            });
        }
    }
    mentions
}

/// The shell word at the start of `text`, quotes removed: `'["/a"]' rest` ->
/// `["/a"]`.
fn shell_word(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(quote @ ('\'' | '"')) => chars.take_while(|&c| c != quote).collect(),
        _ => text
            .chars()
            .take_while(|&c| !c.is_whitespace() && c != '`')
            .collect(),
    }
}

/// The configuration as the loader reads it from `env` alone (no files).
fn load_env(env: &[(&str, &str)]) -> Result<AutumnConfig, ConfigError> {
    let empty = tempfile::tempdir().expect("a temporary directory");
    let env = env
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
    AutumnConfig::load_from(empty.path(), &env)
}

/// What is wrong with naming `mention` in `file`, if anything.
fn check_variable(file: &str, mention: &Mention) -> Result<(), String> {
    let name = mention.name.as_str();
    let at = format!("{file}:{}", mention.line);
    let Some(suffix) = name.strip_prefix("AUTUMN_").filter(|s| !s.is_empty()) else {
        return Ok(()); // The prefix itself: `AUTUMN_`, `AUTUMN_*`.
    };
    if NOT_KEYS.contains(&name) {
        if let (Some(value), "AUTUMN_PROFILE") = (&mention.value, name) {
            load_env(&[(name, value)])
                .map_err(|error| format!("{at}: `{name}={value}` is refused: {error}"))?;
        }
        return Ok(());
    }
    if let Some((_, files, _)) = ILLUSTRATIONS.iter().find(|(n, ..)| *n == name) {
        return if files.contains(&file) {
            Ok(())
        } else {
            Err(format!(
                "{at}: `{name}` is not a configuration key (it is only an illustration in {})",
                files.join(", ")
            ))
        };
    }
    if !suffix.contains("__") {
        return Err(format!(
            "{at}: `{name}` is not a configuration key (a key's variable is AUTUMN_SECTION__KEY, with `__` between the parts) and Autumn reads no such variable (only {})",
            NOT_KEYS.join(", ")
        ));
    }
    let key = suffix.to_lowercase().replace("__", ".");
    // A value no key of any type takes silently: refused with the key's own
    // error when the key exists, with an unknown-key error when it does not.
    match load_env(&[(name, "not-a-value{")]) {
        Err(error @ ConfigError::UnknownKey { .. }) => {
            return Err(format!(
                "{at}: `{name}` is not a configuration key: {error}"
            ));
        }
        // `server.port.x`: the error is about `server.port`, a value, not a table.
        Err(error)
            if error
                .key()
                .is_some_and(|k| key.starts_with(&format!("{k}."))) =>
        {
            return Err(format!(
                "{at}: `{name}` is not a configuration key: {error}"
            ));
        }
        _ => {}
    }
    match &mention.value {
        Some(value) if !value.contains(['$', '<', '>', '…']) => load_env(&[(name, value)])
            .map(drop)
            .map_err(|error| format!("{at}: `{name}={value}` is refused: {error}")),
        _ => Ok(()),
    }
}

fn variable_problems(file: &str, text: &str) -> Vec<String> {
    mentions(text)
        .iter()
        .filter_map(|mention| check_variable(file, mention).err())
        .collect()
}

#[test]
fn every_autumn_variable_in_the_docs_is_a_configuration_key() {
    let mut files = doc_files();
    files.push(file(&root().join("autumn.toml.example")));
    let problems: Vec<String> = files
        .iter()
        .flat_map(|(file, text)| variable_problems(file, text))
        .collect();
    report("AUTUMN_* variables in the docs are wrong", &problems);
}

#[test]
fn the_variable_check_refuses_unknown_keys_and_refused_values() {
    let text = "\
Set `AUTUMN_SERVER__PORT=8080` or AUTUMN_SERVER__PROT=8080.
AUTUMN_LOGG, AUTUMN_SERVER__PORT__X and `AUTUMN_SERVER__PORT=eighty`.
AUTUMN_CORS__ALLOWED_ORIGINS='[\"https://app.example\"]' AUTUMN_DATABASE__URL= AUTUMN_PROFILE=prod AUTUMN_FOO
AUTUMN_PROFILE='p r o d' AUTUMN_SERVER__TIMEOUTS AUTUMN_ MY_AUTUMN_THING
";
    let problems = variable_problems("guide.md", text);
    let expected = [
        (
            "guide.md:1: `AUTUMN_SERVER__PROT` is not a configuration key",
            "unknown key `server.prot`",
        ),
        (
            "guide.md:2: `AUTUMN_LOGG` is not a configuration key",
            "AUTUMN_SECTION__KEY",
        ),
        (
            "guide.md:2: `AUTUMN_SERVER__PORT__X` is not a configuration key",
            "`server.port`",
        ),
        (
            "guide.md:2: `AUTUMN_SERVER__PORT=eighty` is refused",
            "invalid value for `server.port`",
        ),
        (
            "guide.md:3: `AUTUMN_FOO` is not a configuration key",
            "illustration in docs/configuration.md",
        ),
        (
            "guide.md:4: `AUTUMN_PROFILE=p r o d` is refused",
            "invalid profile",
        ),
    ];
    assert_problems(&problems, &expected);
}

#[test]
fn the_variables_that_are_not_keys_are_the_ones_the_loader_reads() {
    let env = read(&root().join("crates/autumn-core/src/config/env.rs"));
    let read_by_the_loader: BTreeSet<String> = string_literals(&env)
        .into_iter()
        .filter(|literal| literal.starts_with("AUTUMN_") && literal.len() > "AUTUMN_".len())
        .filter(|literal| !literal.contains("__"))
        .collect();
    let allowed: BTreeSet<String> = NOT_KEYS.iter().map(|name| (*name).to_owned()).collect();
    assert_eq!(allowed, read_by_the_loader);
}

// ---- startup errors ---------------------------------------------------------------------------

/// A message the code can print: a format string's literal parts and its
/// `{...}` placeholders (holes).
enum Part {
    Text(String),
    Hole,
}

struct Template(Vec<Part>);

impl Template {
    /// Parses Rust format syntax: `{{` and `}}` are braces, `{...}` a hole.
    fn parse(format: &str) -> Self {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = format;
        while let Some(c) = rest.chars().next() {
            let after = &rest[c.len_utf8()..];
            match c {
                '{' if after.starts_with('{') => {
                    text.push('{');
                    rest = &after[1..];
                }
                '}' if after.starts_with('}') => {
                    text.push('}');
                    rest = &after[1..];
                }
                '{' => match after.find('}') {
                    Some(end) => {
                        if !text.is_empty() {
                            parts.push(Part::Text(std::mem::take(&mut text)));
                        }
                        parts.push(Part::Hole);
                        rest = &after[end + 1..];
                    }
                    None => {
                        text.push_str(rest);
                        rest = "";
                    }
                },
                _ => {
                    text.push(c);
                    rest = after;
                }
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Self(parts)
    }

    /// Whether the literal text says something (has a letter): `{}: {}`
    /// alone would match nearly any line.
    fn says_something(&self) -> bool {
        self.0.iter().any(|part| match part {
            Part::Text(text) => text.chars().any(char::is_alphabetic),
            Part::Hole => false,
        })
    }

    fn render(&self) -> String {
        self.0
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.as_str(),
                Part::Hole => "{}",
            })
            .collect()
    }
}

/// The string literals of Rust `source`, unescaped, outside comments.
fn string_literals(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let is_ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    let mut literals = Vec::new();
    let mut i = 0;
    while let Some(c) = at(i) {
        match c {
            '/' if at(i + 1) == Some('/') => {
                while at(i).is_some_and(|c| c != '\n') {
                    i += 1;
                }
            }
            '/' if at(i + 1) == Some('*') => {
                let mut depth = 0;
                loop {
                    match (at(i), at(i + 1)) {
                        (Some('/'), Some('*')) => {
                            depth += 1;
                            i += 2;
                        }
                        (Some('*'), Some('/')) => {
                            depth -= 1;
                            i += 2;
                            if depth == 0 {
                                break;
                            }
                        }
                        (Some(_), _) => i += 1,
                        (None, _) => break,
                    }
                }
            }
            'r' if !is_ident(i.checked_sub(1).and_then(at))
                && matches!(at(i + 1), Some('"' | '#')) =>
            {
                let hashes = (i + 1..).take_while(|&j| at(j) == Some('#')).count();
                let open = i + 1 + hashes;
                if at(open) != Some('"') {
                    i = open; // A raw identifier such as `r#type`.
                    continue;
                }
                let closes =
                    |j: usize| at(j) == Some('"') && (1..=hashes).all(|k| at(j + k) == Some('#'));
                let end = (open + 1..chars.len())
                    .find(|&j| closes(j))
                    .unwrap_or(chars.len());
                literals.push(chars[open + 1..end].iter().collect());
                i = end + 1 + hashes;
            }
            '"' => {
                let mut literal = String::new();
                i += 1;
                while let Some(c) = at(i) {
                    i += 1;
                    match c {
                        '"' => break,
                        '\\' => {
                            let escaped = at(i);
                            i += 1;
                            match escaped {
                                Some('n') => literal.push('\n'),
                                Some('t') => literal.push('\t'),
                                Some('r') => literal.push('\r'),
                                Some('0') => literal.push('\0'),
                                Some('\n') => {
                                    while at(i).is_some_and(char::is_whitespace) {
                                        i += 1;
                                    }
                                }
                                Some('x') => {
                                    let hex: String =
                                        chars[i..(i + 2).min(chars.len())].iter().collect();
                                    literal
                                        .extend(u8::from_str_radix(&hex, 16).ok().map(char::from));
                                    i += 2;
                                }
                                Some('u') => {
                                    let close =
                                        (i..chars.len()).find(|&j| at(j) == Some('}')).unwrap_or(i);
                                    let hex: String =
                                        chars[(i + 1).min(close)..close].iter().collect();
                                    literal.extend(
                                        u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32),
                                    );
                                    i = close + 1;
                                }
                                Some(other) => literal.push(other),
                                None => {}
                            }
                        }
                        c => literal.push(c),
                    }
                }
                literals.push(literal);
            }
            '\'' => {
                // A char literal (`'"'`, `'\''`) or a lifetime (`'a`).
                if at(i + 1) == Some('\\') {
                    i = (i + 3..chars.len())
                        .find(|&j| at(j) == Some('\''))
                        .map_or(chars.len(), |j| j + 1);
                } else if at(i + 2) == Some('\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    literals
}

/// The Rust files under `dir`, recursively, except test modules.
fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for path in sorted_entries(dir) {
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && path.file_name().is_some_and(|name| name != "tests.rs")
        {
            files.push(path);
        }
    }
}

/// Every message the code can print: each string literal of the library
/// sources of autumn-web, autumn-core, autumn-idempotency and autumn-base (outside test
/// modules) read as a format string, plus the startup errors this test
/// provokes, whose wording past Autumn's own (the operating system's, a
/// driver's) no format string holds.
fn templates() -> &'static [Template] {
    static TEMPLATES: OnceLock<Vec<Template>> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let mut files = Vec::new();
        for krate in [
            "autumn-web",
            "autumn-core",
            "autumn-idempotency",
            "autumn-base",
        ] {
            rust_files(&root().join("crates").join(krate).join("src"), &mut files);
        }
        let mut formats: BTreeSet<String> = files
            .iter()
            .flat_map(|path| {
                let source = read(path);
                let code = source
                    .split("\n#[cfg(test)]\nmod tests")
                    .next()
                    .unwrap_or_default()
                    .to_owned();
                string_literals(&code)
            })
            .collect();
        formats.extend(provoked_startup_errors());
        formats
            .iter()
            .map(|format| Template::parse(format))
            .filter(Template::says_something)
            .collect()
    })
}

/// The lines `run()` prints for a Redis and a database that refuse the
/// connection (a closed port on loopback), as format strings: the URL and the
/// operating system's error code are holes.
fn provoked_startup_errors() -> Vec<String> {
    let cases = [
        (
            "[idempotency]\nbackend = \"redis\"\n[idempotency.redis]\nurl = \"redis://:secret@127.0.0.1:1/0\"\n",
            "redis://:***@127.0.0.1:1/0",
        ),
        (
            "[database]\nurl = \"postgres://app:secret@127.0.0.1:1/shop\"\n",
            "postgres://app:***@127.0.0.1:1/shop",
        ),
    ];
    cases
        .iter()
        .map(|(toml, url)| {
            let config = AutumnConfig::from_toml_str(toml).expect("a valid configuration");
            let error = match autumn_web::app()
                .with_config(config)
                .idempotent()
                .into_router()
            {
                Ok(_) => panic!("nothing listens on 127.0.0.1:1, yet {toml} launched"),
                Err(error) => error,
            };
            let line = format!("autumn: {error}")
                .replace('{', "{{")
                .replace('}', "}}")
                .replace(url, "{url}");
            match line.split_once("(os error ") {
                Some((before, after)) => match after.split_once(')') {
                    Some((_, after)) => format!("{before}(os error {{code}}){after}"),
                    None => line.clone(),
                },
                None => line,
            }
        })
        .collect()
}

/// Matches lines against the templates. A hole takes any text without
/// whitespace (a URL, a key, a number) or, nested, a whole message that
/// itself matches a template (an error's source), so that the wording of a
/// wrapped error is checked too.
struct Matcher<'t> {
    templates: &'t [Template],
    memo: RefCell<HashMap<(String, usize), bool>>,
}

impl<'t> Matcher<'t> {
    /// How deep errors nest in a message: `autumn: {error}` around a launch
    /// error around a store error around a driver's.
    const DEPTH: usize = 6;

    fn new(templates: &'t [Template]) -> Self {
        Self {
            templates,
            memo: RefCell::new(HashMap::new()),
        }
    }

    fn printable(&self, line: &str) -> bool {
        self.any(line, Self::DEPTH)
    }

    fn any(&self, text: &str, depth: usize) -> bool {
        if depth == 0 {
            return false;
        }
        let key = (text.to_owned(), depth);
        if let Some(&known) = self.memo.borrow().get(&key) {
            return known;
        }
        let found = self
            .templates
            .iter()
            .any(|template| self.parts(&template.0, text, depth));
        self.memo.borrow_mut().insert(key, found);
        found
    }

    fn parts(&self, parts: &[Part], text: &str, depth: usize) -> bool {
        match parts.split_first() {
            None => text.is_empty(),
            Some((Part::Text(literal), rest)) => text
                .strip_prefix(literal.as_str())
                .is_some_and(|text| self.parts(rest, text, depth)),
            Some((Part::Hole, rest)) => {
                let ends: Vec<usize> = match rest.first() {
                    None => vec![text.len()],
                    Some(Part::Text(next)) => text
                        .match_indices(next.as_str())
                        .map(|(end, _)| end)
                        .collect(),
                    Some(Part::Hole) => (0..=text.len())
                        .filter(|&end| text.is_char_boundary(end))
                        .collect(),
                };
                ends.into_iter().any(|end| {
                    let (filled, text) = text.split_at(end);
                    self.fills(filled, depth) && self.parts(rest, text, depth)
                })
            }
        }
    }

    fn fills(&self, text: &str, depth: usize) -> bool {
        !text.contains(char::is_whitespace) || self.any(text, depth - 1)
    }

    /// The template that shares the longest start with `line`, or with the
    /// line without its `autumn: ` (which most messages leave to `run()`), for
    /// the report.
    fn closest(&self, line: &str) -> String {
        let common =
            |a: &str, b: &str| a.chars().zip(b.chars()).take_while(|(a, b)| a == b).count();
        let message = line.strip_prefix("autumn: ").unwrap_or(line);
        self.templates
            .iter()
            .map(|template| {
                let rendered = template.render();
                let whole = common(&rendered, line);
                let inner = common(&rendered, message);
                if inner > whole {
                    (inner, format!("autumn: {rendered}"))
                } else {
                    (whole, rendered)
                }
            })
            .max_by_key(|(common, _)| *common)
            .map(|(_, rendered)| rendered)
            .unwrap_or_default()
    }
}

/// The block languages where a program's output is quoted.
const OUTPUT_BLOCKS: &[&str] = &["", "text", "console", "sh", "shell", "bash"];

fn startup_error_problems(matcher: &Matcher<'_>, file: &str, markdown: &str) -> Vec<String> {
    blocks(markdown)
        .iter()
        .filter(|block| OUTPUT_BLOCKS.contains(&block.lang.as_str()))
        .flat_map(|block| block.lines.iter())
        .filter(|(_, line)| line.trim_start().starts_with("autumn: "))
        .filter(|(_, line)| !matcher.printable(line.trim()))
        .map(|(number, line)| {
            format!(
                "{file}:{number}: the code prints no such line: `{}` (the closest message it has: `{}`)",
                line.trim(),
                matcher.closest(line.trim())
            )
        })
        .collect()
}

#[test]
fn every_startup_error_quoted_in_the_docs_is_one_the_code_prints() {
    let matcher = Matcher::new(templates());
    let problems: Vec<String> = doc_files()
        .iter()
        .flat_map(|(file, text)| startup_error_problems(&matcher, file, text))
        .collect();
    report(
        "startup errors quoted in the docs are not what the code prints",
        &problems,
    );
}

#[test]
fn the_startup_error_check_refuses_a_line_the_code_cannot_print() {
    let matcher = Matcher::new(templates());
    // Real, though this build (with every backend) cannot print it.
    let unavailable = LaunchError::BackendUnavailable {
        backend: "redis".to_owned(),
    };
    let markdown = format!(
        "\
```text
autumn: {unavailable}
autumn: cannot use the database at database.url (postgres://app:***@db.internal/shop): this build of autumn-web has no database; enable the autumn-web feature `postgres`
autumn: cannot reach Redis for idempotency.redis.url (redis://cache:6379/0): idempotency store failed: Redis at redis://cache:6379/0 did not answer PING: Connection refused (os error 61)
autumn: idempotency.backend = \"redis\" is not available in this build of autumn-web; use idempotency.backend = \"memory\"
autumn: cannot use the database at database.url (postgres://app:***@db.internal/shop): autumn-web was built without the `postgres` and `sqlite` features
autumn: cannot reach Redis for idempotency.redis.url (redis://cache:6379/0): idempotency store failed: Redis at redis://cache:6379/0 did not answer PING: Connection refused
```

```rust
autumn: not output, not checked
```
"
    );
    let problems = startup_error_problems(&matcher, "guide.md", &markdown);
    let lines: Vec<&str> = problems
        .iter()
        .map(|problem| problem.split(':').nth(1).unwrap_or_default())
        .collect();
    assert_eq!(lines, ["5", "6", "7"], "{problems:#?}");
}

// ---------------------------------------------------------------------------
// ARCHITECTURE.md names paths that exist.

/// Every file or folder ARCHITECTURE.md names in backticks (`launch.rs`,
/// `app/`, `crates/autumn-core/src/scope.rs`), with its line: a path from
/// the repository's root must exist there; a shorter one must end some
/// path in the crate whose section (`### \`crates/...\``) names it, or
/// anywhere in the repository outside those sections.
fn architecture_path_problems(
    markdown: &str,
    exists: &dyn Fn(&str, Option<&str>) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut section_crate: Option<String> = None;
    for (index, line) in markdown.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("### ") {
            section_crate = heading
                .trim_matches('`')
                .strip_prefix("crates/")
                .map(str::to_owned);
        } else if line.starts_with("## ") {
            section_crate = None;
        }
        for (at, token) in line.split('`').enumerate() {
            // Odd pieces are inside backticks.
            if at % 2 == 0 || !looks_like_path(token) {
                continue;
            }
            if !exists(token, section_crate.as_deref()) {
                problems.push(format!(
                    "ARCHITECTURE.md:{}: `{token}` names no file or folder{}",
                    index + 1,
                    section_crate
                        .as_deref()
                        .map(|krate| format!(" of crates/{krate}"))
                        .unwrap_or_default()
                ));
            }
        }
    }
    problems
}

/// A token such as `layer.rs`, `store/`, `docs/middleware.md`: no spaces,
/// no `:` (paths in code, URLs), and a file ending or a closing slash.
fn looks_like_path(token: &str) -> bool {
    !token.is_empty()
        && !token.contains(char::is_whitespace)
        && !token.contains(':')
        && !token.contains(['*', '{', '<', '(', '='])
        && (token.ends_with('/')
            || [".rs", ".md", ".toml", ".json"]
                .iter()
                .any(|ending| token.ends_with(ending)))
}

/// Whether `token` names something in the working tree, as
/// [`architecture_path_problems`] reads it.
fn exists_in_tree(token: &str, krate: Option<&str>) -> bool {
    let root = root();
    let token = token.trim_end_matches('/');
    if root.join(token).exists() {
        return true;
    }
    let base = match krate {
        Some(krate) => root.join("crates").join(krate),
        None => root.clone(),
    };
    let mut found = false;
    walk(&base, &mut |path| {
        found |= path.ends_with(token);
    });
    found
}

/// Calls `visit` on every file and folder under `dir`, build output and
/// hidden folders left out.
fn walk(dir: &Path, visit: &mut dyn FnMut(&Path)) {
    for path in sorted_entries(dir) {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .unwrap_or("");
        if name == "target" || name.starts_with('.') {
            continue;
        }
        visit(&path);
        if path.is_dir() {
            walk(&path, visit);
        }
    }
}

#[test]
fn every_path_architecture_md_names_exists() {
    let markdown = read(&root().join("ARCHITECTURE.md"));
    report(
        "paths named in ARCHITECTURE.md do not exist",
        &architecture_path_problems(&markdown, &exists_in_tree),
    );
}

#[test]
fn the_architecture_path_check_refuses_a_file_that_is_gone() {
    let markdown = "### `crates/autumn-core`\n\n- `app/`: `launch.rs` and `gone.rs`.\n\n## Words\n\n`nowhere/` and `README.md`\n";
    let problems = architecture_path_problems(markdown, &exists_in_tree);
    assert_eq!(
        problems,
        [
            "ARCHITECTURE.md:3: `gone.rs` names no file or folder of crates/autumn-core",
            "ARCHITECTURE.md:7: `nowhere/` names no file or folder",
        ],
        "{problems:#?}"
    );
}

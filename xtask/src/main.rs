//! `cargo xtask check-docs`: every file and Rust item that the docs name exists in the tree.
//!
//! Read: `README.md`, every `docs/**/*.md`, and the crate-level `//!` docs of each crate
//! (`*/src/lib.rs`, `*/src/main.rs`). Checked, in backticks and in Markdown links:
//!
//! - **file paths**: a word with a `/` whose first component is a top-level entry of the
//!   repository (`rpc/src/conn.rs`, `docs/LIMITS.md`, `bench/results/.../`) must exist
//!   (in a crate's `//!`, `src/<file>.rs` is read from the crate); a bare `<name>.rs`,
//!   `<name>.md` or `<name>.sh` must be some file's name; a Markdown link must resolve
//!   from its page;
//! - **Rust paths** (`rpc::record::read_record`, `Dispatcher::handle`, `vfs::FsError`):
//!   a path that starts with one of the workspace's crates must name an item defined in
//!   that crate (its modules in between must exist); `Type::member` of a type defined in
//!   the tree must name a method, associated item, variant or field in a file that defines
//!   or implements the type; `fn name` and `name()` must name a function of the tree.
//!
//! "Defined" is a line-level scan (`fn name`, `struct Name`, `Name(..),` in an enum, ...),
//! not name resolution: enough to catch a renamed or removed item, not a wrong signature.
//! Paths into other crates (`std::`, `tokio::`, ...), commands, URLs and placeholders
//! (`<date>`, `*`) are left alone. Exit status 1 and one line per broken reference.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let task = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "check-docs".into());
    if task != "check-docs" {
        eprintln!("xtask: unknown task {task:?}; the one task is `cargo xtask check-docs`");
        return ExitCode::from(2);
    }
    // `cargo xtask` (cargo run) names the package's directory at run time: a binary
    // built in another checkout sharing the target directory checks this tree, not that.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let root = manifest
        .parent()
        .expect("xtask/ is inside the repository")
        .to_path_buf();
    let tree = match Tree::scan(&root) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("xtask: cannot read the tree under {}: {e}", root.display());
            return ExitCode::FAILURE;
        }
    };
    let mut broken = Vec::new();
    let mut refs = 0usize;
    for doc in tree.docs() {
        let Ok(text) = fs::read_to_string(root.join(&doc.path)) else {
            broken.push(format!("{}: cannot read", doc.path.display()));
            continue;
        };
        for (line, span, is_link) in doc.references(&text) {
            refs += 1;
            if let Err(why) = tree.check(&doc, &span, is_link) {
                broken.push(format!("{}:{line}: `{span}`: {why}", doc.path.display()));
            }
        }
    }
    for b in &broken {
        println!("{b}");
    }
    if broken.is_empty() {
        println!(
            "check-docs: {refs} references in {} documents resolve",
            tree.docs().len()
        );
        ExitCode::SUCCESS
    } else {
        println!(
            "check-docs: {} of {refs} references do not resolve",
            broken.len()
        );
        ExitCode::FAILURE
    }
}

/// A document and where its references are read from.
struct Doc {
    /// Relative to the repository root.
    path: PathBuf,
    /// `Some(crate dir)` for a crate's `//!` docs, `None` for Markdown.
    krate: Option<PathBuf>,
}

impl Doc {
    /// (line number, text, whether it is a Markdown link target) of every backtick span
    /// and link in the document (for Rust files, in its `//!` lines only).
    fn references(&self, text: &str) -> Vec<(usize, String, bool)> {
        let mut out = Vec::new();
        let mut fenced = false;
        for (i, raw) in text.lines().enumerate() {
            let line = if self.krate.is_some() {
                match raw.trim_start().strip_prefix("//!") {
                    Some(rest) => rest,
                    None => continue,
                }
            } else {
                raw
            };
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                continue;
            }
            for (k, part) in line.split('`').enumerate() {
                if k % 2 == 1 && !part.is_empty() {
                    out.push((i + 1, part.to_string(), false));
                }
            }
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                rest = &rest[at + 2..];
                if let Some(end) = rest.find(')') {
                    out.push((i + 1, rest[..end].to_string(), true));
                }
            }
        }
        out
    }
}

/// What the Rust sources define, and which files exist.
struct Tree {
    root: PathBuf,
    /// Every file under the root (relative), target directories and .git left out.
    files: BTreeSet<PathBuf>,
    /// Item name → files defining it (fn, struct, enum, trait, type, const, static, mod,
    /// macro_rules!).
    items: BTreeMap<String, BTreeSet<PathBuf>>,
    /// Member name (variant or field, from `Name(`, `Name,`, `name:` lines) → files.
    members: BTreeMap<String, BTreeSet<PathBuf>>,
    /// Type name → files that define or `impl` it.
    impls: BTreeMap<String, BTreeSet<PathBuf>>,
    /// The names types are defined under (struct, enum, trait, type, union).
    types: BTreeSet<String>,
    /// The workspace's crates as code names them (`rpc`, `backend_host`, `granary_plot`)
    /// → their directory.
    crates: BTreeMap<String, PathBuf>,
}

const KEYWORDS: [&str; 10] = [
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "union",
    "macro_rules!",
];

impl Tree {
    fn scan(root: &Path) -> std::io::Result<Self> {
        let mut tree = Self {
            root: root.to_path_buf(),
            files: BTreeSet::new(),
            items: BTreeMap::new(),
            members: BTreeMap::new(),
            impls: BTreeMap::new(),
            types: BTreeSet::new(),
            crates: BTreeMap::new(),
        };
        walk(root, Path::new(""), &mut tree.files)?;
        let rust: Vec<PathBuf> = tree
            .files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "rs"))
            .cloned()
            .collect();
        for file in rust {
            let text = fs::read_to_string(root.join(&file)).unwrap_or_default();
            tree.index(&file, &text);
        }
        tree.find_crates()?;
        Ok(tree)
    }

    fn index(&mut self, file: &Path, text: &str) {
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("//") {
                continue;
            }
            let words: Vec<&str> = t
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
                .filter(|w| !w.is_empty())
                .collect();
            for pair in words.windows(2) {
                if KEYWORDS.contains(&pair[0]) {
                    let name = pair[1].trim_end_matches('!').to_string();
                    if ["struct", "enum", "trait", "type", "union"].contains(&pair[0]) {
                        self.types.insert(name.clone());
                        add(&mut self.impls, &name, file);
                    }
                    add(&mut self.items, &name, file);
                }
            }
            if let Some(rest) = t.strip_prefix("impl") {
                // `impl<T> Trait for Type<T>`, `impl Type`: the type is the word after
                // `for`, or else the first word after the generics.
                let rest = skip_generics(rest);
                let ty = match rest.split(" for ").nth(1) {
                    Some(after) => after,
                    None => rest,
                };
                if let Some(name) = ty
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .find(|w| !w.is_empty())
                {
                    let name = name.rsplit("::").next().unwrap_or(name);
                    add(&mut self.impls, name, file);
                }
            }
            let t = t.strip_prefix("pub ").unwrap_or(t);
            let name: String = t
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let after = t[name.len()..].trim_start();
            let member = !name.is_empty()
                && (after.is_empty()
                    || [",", "(", "{", ":", "="]
                        .iter()
                        .any(|p| after.starts_with(p)));
            if member && !after.starts_with("::") {
                add(&mut self.members, &name, file);
            }
        }
    }

    /// The workspace's crates from the root manifest's `[workspace.dependencies]` paths
    /// (the names code uses) and every member's package name.
    fn find_crates(&mut self) -> std::io::Result<()> {
        let manifest = fs::read_to_string(self.root.join("Cargo.toml"))?;
        for line in manifest.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let path = value
                .split("path = \"")
                .nth(1)
                .and_then(|p| p.split('"').next());
            if let Some(dir) = path {
                self.crates
                    .insert(key.trim().replace('-', "_"), PathBuf::from(dir));
            }
        }
        let dirs: Vec<PathBuf> = self
            .files
            .iter()
            .filter(|f| f.file_name().is_some_and(|n| n == "Cargo.toml"))
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .filter(|d| !d.as_os_str().is_empty())
            .collect();
        for dir in dirs {
            let text = fs::read_to_string(self.root.join(&dir).join("Cargo.toml"))?;
            let name = text
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|n| n.split('"').next());
            if let Some(name) = name {
                self.crates.insert(name.replace('-', "_"), dir);
            }
        }
        self.crates
            .insert("granary".into(), PathBuf::from("server"));
        Ok(())
    }

    /// README.md, docs/**/*.md and each crate's lib.rs / main.rs.
    fn docs(&self) -> Vec<Doc> {
        self.files
            .iter()
            .filter_map(|f| {
                let s = f.to_string_lossy();
                if s == "README.md" || (s.starts_with("docs/") && s.ends_with(".md")) {
                    return Some(Doc {
                        path: f.clone(),
                        krate: None,
                    });
                }
                let crate_root = s.ends_with("/src/lib.rs") || s.ends_with("/src/main.rs");
                let krate = f.parent()?.parent()?;
                (crate_root && self.files.contains(&krate.join("Cargo.toml"))).then(|| Doc {
                    path: f.clone(),
                    krate: Some(krate.to_path_buf()),
                })
            })
            .collect()
    }

    fn check(&self, doc: &Doc, span: &str, is_link: bool) -> Result<(), String> {
        if is_link {
            return self.check_link(doc, span);
        }
        let span = span.trim();
        if let Some(name) = span.strip_prefix("fn ") {
            return self.check_fn(name.trim_end_matches("()"));
        }
        for word in span.split_whitespace() {
            let word = word
                .trim_start_matches(['(', '['])
                .trim_end_matches([',', '.', ';', ':', ')', ']']);
            self.check_path(doc, word)?;
        }
        if !span.contains(char::is_whitespace) {
            self.check_rust(doc, span)?;
        }
        Ok(())
    }

    fn check_link(&self, doc: &Doc, target: &str) -> Result<(), String> {
        let target = target.split('#').next().unwrap_or("").trim();
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            return Ok(());
        }
        let from = doc.path.parent().unwrap_or(Path::new(""));
        let path = normalize(&from.join(target));
        if self.exists(&path) {
            Ok(())
        } else {
            Err(format!("link target {} does not exist", path.display()))
        }
    }

    fn exists(&self, path: &Path) -> bool {
        path.as_os_str().is_empty()
            || self.files.contains(path)
            || self.files.iter().any(|f| f.starts_with(path))
    }

    /// A word that looks like a path of this repository.
    fn check_path(&self, doc: &Doc, word: &str) -> Result<(), String> {
        let skip = word.contains("://")
            || word.starts_with(['/', '~', '$', '.', '-'])
            || word.contains(['<', '*', '{', '?', '=', '|', '"', '\''])
            || word.contains("...")
            || word.contains("::");
        if skip {
            return Ok(());
        }
        let ext = Path::new(word).extension().and_then(|e| e.to_str());
        if !word.contains('/') {
            let named = matches!(ext, Some("rs" | "md" | "sh"));
            let found = self
                .files
                .iter()
                .any(|f| f.file_name().is_some_and(|n| n == word));
            return if !named || found {
                Ok(())
            } else {
                Err(format!("no file named {word} in the repository"))
            };
        }
        let first = word.split('/').next().unwrap_or("");
        let top = self.files.iter().any(|f| f.starts_with(first));
        let path = normalize(Path::new(word.trim_end_matches('/')));
        if top {
            return if self.exists(&path) {
                Ok(())
            } else {
                Err(format!("{} does not exist", path.display()))
            };
        }
        if let (Some(krate), "src") = (&doc.krate, first) {
            let path = krate.join(&path);
            if !self.exists(&path) {
                return Err(format!("{} does not exist", path.display()));
            }
        }
        Ok(())
    }

    fn check_fn(&self, name: &str) -> Result<(), String> {
        let defined = self.items.contains_key(name);
        if defined || !is_ident(name) {
            Ok(())
        } else {
            Err(format!("no fn {name} in the tree"))
        }
    }

    /// `crate::module::item`, `Type::member`, `name()`.
    fn check_rust(&self, doc: &Doc, span: &str) -> Result<(), String> {
        let called = span.ends_with("()");
        let span = span.trim_end_matches("()").trim_end_matches('!');
        let segs: Vec<&str> = span.split("::").collect();
        if !segs.iter().all(|s| is_ident(s)) {
            return Ok(());
        }
        if segs.len() == 1 {
            return if called { self.check_fn(span) } else { Ok(()) };
        }
        let krate = match segs[0] {
            "crate" | "self" | "super" => doc.krate.clone(),
            first => self.crates.get(first).cloned(),
        };
        match krate {
            Some(dir) => self.check_in_crate(&dir, &segs[1..]),
            None if starts_upper(segs[0]) && self.types.contains(segs[0]) => {
                self.check_member(segs[0], &segs[1..])
            }
            None => Ok(()),
        }
    }

    /// `segs` after the crate: modules, then an item or a type and its member.
    fn check_in_crate(&self, dir: &Path, segs: &[&str]) -> Result<(), String> {
        let in_crate = |name: &str, map: &BTreeMap<String, BTreeSet<PathBuf>>| {
            map.get(name)
                .is_some_and(|files| files.iter().any(|f| f.starts_with(dir)))
        };
        for (i, seg) in segs.iter().enumerate() {
            let last = i + 1 == segs.len();
            if starts_upper(seg) {
                if !in_crate(seg, &self.items) && !in_crate(seg, &self.members) {
                    return Err(format!("no {seg} defined in {}/", dir.display()));
                }
                return if last {
                    Ok(())
                } else {
                    self.check_member(seg, &segs[i + 1..])
                };
            }
            if last {
                return if in_crate(seg, &self.items) || in_crate(seg, &self.members) {
                    Ok(())
                } else {
                    Err(format!("no {seg} defined in {}/", dir.display()))
                };
            }
            let module = self.files.iter().any(|f| {
                f.starts_with(dir)
                    && (f.file_stem().is_some_and(|s| s == *seg)
                        || f.parent()
                            .and_then(Path::file_name)
                            .is_some_and(|p| p == *seg))
            });
            if !module && !in_crate(seg, &self.items) {
                return Err(format!("no module {seg} in {}/", dir.display()));
            }
        }
        Ok(())
    }

    /// `Type::member`: a method, associated item, variant or field in a file that defines
    /// or implements the type.
    fn check_member(&self, ty: &str, rest: &[&str]) -> Result<(), String> {
        let Some(member) = rest.first() else {
            return Ok(());
        };
        let files = self.impls.get(ty).cloned().unwrap_or_default();
        let found = |map: &BTreeMap<String, BTreeSet<PathBuf>>| {
            map.get(*member)
                .is_some_and(|fs| fs.iter().any(|f| files.contains(f)))
        };
        if found(&self.items) || found(&self.members) || !self.types.contains(ty) {
            Ok(())
        } else {
            Err(format!(
                "{ty} has no {member} (in the files that define or implement it)"
            ))
        }
    }
}

fn add(map: &mut BTreeMap<String, BTreeSet<PathBuf>>, name: &str, file: &Path) {
    map.entry(name.to_string())
        .or_default()
        .insert(file.to_path_buf());
}

fn skip_generics(s: &str) -> &str {
    let s = s.trim_start();
    if !s.starts_with('<') {
        return s;
    }
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    s
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || c == '_')
}

fn starts_upper(s: &str) -> bool {
    s.chars().next().is_some_and(char::is_uppercase)
}

/// `a/./b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Every file below `dir`, relative to the root, leaving out build output and VCS data.
fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(root.join(dir))? {
        let entry = entry?;
        let name = entry.file_name();
        let rel = dir.join(&name);
        let skip = [".git", "target", "corpus", "artifacts", "coverage"];
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        if entry.file_type()?.is_dir() {
            walk(root, &rel, out)?;
        } else {
            out.insert(rel);
        }
    }
    Ok(())
}

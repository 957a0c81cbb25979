//! `trainscale validate`: check job manifests (every job kind) and report every error and
//! warning; PriorityClasses in the same files resolve the jobs' priority names. Objects of other
//! kinds (a bundle's Services, ConfigMaps, ...) are skipped, each with a line saying so; a
//! batch/v1 Job that does not opt in to elastic sizing is no job: passed over without a word.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::api::FieldError;
use crate::api::manifest::{
    Document, ObjectIndex, SharedChildren, read_each, shared_children_problem,
};
use crate::api::names::printable;
use crate::api::validate::{ObjectReport, priority_classes_of, validate_document};
use crate::cluster::kinds::{ignored, unchecked_kind};

/// The reports of every object in the files, and files that could not be read at all.
#[derive(Debug, Default)]
pub struct ValidationOutcome {
    pub objects: Vec<ObjectReport>,
    /// Objects of kinds `validate` does not check (see [`unchecked_kind`]), as printed.
    pub skipped: Vec<String>,
    pub unreadable: Vec<String>,
}

impl ValidationOutcome {
    /// Whether every file was read and no object has an error (nor, when `strict`, a warning).
    pub fn ok(&self, strict: bool) -> bool {
        self.unreadable.is_empty()
            && self
                .objects
                .iter()
                .all(|o| o.errors.is_empty() && (!strict || o.warnings.is_empty()))
    }

    /// One line each (control characters escaped): `skipped:` per object of a kind not checked,
    /// `invalid:` per error, `warning:` per warning, `ok:` per object without errors, a summary
    /// (the skipped ones counted apart from the checked ones).
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.unreadable {
            out.push_str(&format!("error: {}\n", printable(e)));
        }
        for s in &self.skipped {
            out.push_str(&format!("skipped: {s}\n"));
        }
        for o in &self.objects {
            for p in &o.errors {
                out.push_str(&format!("invalid: {p}\n"));
            }
            for w in &o.warnings {
                out.push_str(&format!("warning: {w}\n"));
            }
            if o.errors.is_empty() {
                out.push_str(&format!("ok: {}\n", printable(&o.object)));
            }
        }
        let bad = self.objects.iter().filter(|o| !o.errors.is_empty()).count();
        let warnings: usize = self.objects.iter().map(|o| o.warnings.len()).sum();
        out.push_str(&format!(
            "{} object(s) checked, {} invalid, {} warning(s)",
            self.objects.len(),
            bad + self.unreadable.len(),
            warnings
        ));
        if !self.skipped.is_empty() {
            out.push_str(&format!(
                ", {} skipped (not a job kind)",
                self.skipped.len()
            ));
        }
        out.push('\n');
        out
    }
}

/// The extensions of the files read from a directory given to `-f`, as kubectl's
/// (`FileExtensions`; matched case-sensitively, like Go's `filepath.Ext`).
pub const MANIFEST_EXTENSIONS: [&str; 3] = ["json", "yaml", "yml"];

/// The paths given to `-f` with each directory replaced by its `.json`, `.yaml` and `.yml` files
/// in name order, as kubectl reads `-f DIR`: only the directory's own files, or with
/// `recursive` (`-R`) its subdirectories' too, depth first in name order; a link is not
/// followed into a directory. A file named itself is kept whatever its extension. A directory
/// that cannot be listed or holds no such file is an unreadable entry (the second value).
pub fn manifest_files(paths: &[PathBuf], recursive: bool) -> (Vec<PathBuf>, Vec<String>) {
    let mut files = Vec::new();
    let mut unreadable = Vec::new();
    for path in paths {
        if !path.is_dir() {
            files.push(path.clone());
            continue;
        }
        let before = files.len();
        if let Err(e) = directory_files(path, recursive, &mut files) {
            unreadable.push(e);
        } else if files.len() == before {
            unreadable.push(format!(
                "{}: a directory without .json, .yaml or .yml files{}",
                path.display(),
                if recursive {
                    ""
                } else {
                    " (-R reads its subdirectories)"
                }
            ));
        }
    }
    (files, unreadable)
}

/// Appends the manifest files of `dir` to `out`, in name order (see [`manifest_files`]).
fn directory_files(dir: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let error = |e: std::io::Error| format!("{}: {e}", dir.display());
    let mut entries = std::fs::read_dir(dir)
        .map_err(error)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(error)?;
    entries.sort();
    for path in entries {
        // `symlink_metadata`: a link is a file here, as Go's `filepath.Walk` sees it.
        let is_dir = std::fs::symlink_metadata(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .is_dir();
        if is_dir {
            if recursive {
                directory_files(&path, recursive, out)?;
            }
        } else if path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// The files, each read once: a path naming the same file as an earlier one (the same path
/// twice, `./a.yaml` and `a.yaml`, a link) is dropped; a path that cannot be resolved is kept,
/// to be reported unreadable.
fn distinct_files(files: &[PathBuf]) -> Vec<&Path> {
    let mut seen = std::collections::HashSet::new();
    files
        .iter()
        .filter(|path| {
            seen.insert(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()))
        })
        .map(PathBuf::as_path)
        .collect()
}

/// Validates every object of every distinct file but the ignored ones (see [`ignored`]) and
/// those of kinds it does not check (listed as skipped, see [`unchecked_kind`]); PriorityClasses
/// from all the files count for every job. Files are read twice, object by object (first for
/// the PriorityClasses), so no file is held whole; an object whose kind, namespace and name an
/// earlier one has is an error naming both.
pub fn validate_files(files: &[PathBuf]) -> ValidationOutcome {
    let mut outcome = ValidationOutcome::default();
    let mut class_docs: Vec<Document> = Vec::new();
    let mut readable = Vec::new();
    for path in distinct_files(files) {
        let mut found = 0usize;
        let read = read_each(path, |doc| {
            found += 1;
            if doc.kind() == "PriorityClass" {
                class_docs.push(doc);
            }
        });
        match read {
            Ok(()) if found == 0 => outcome
                .unreadable
                .push(format!("{}: no objects found", path.display())),
            Ok(()) => readable.push(path),
            Err(e) => outcome.unreadable.push(e.to_string()),
        }
    }
    let classes = priority_classes_of(&class_docs);
    let mut index = ObjectIndex::default();
    let mut shared = SharedChildren::default();
    for path in readable {
        let read = read_each(path, |doc| {
            if ignored(&doc) {
                return;
            }
            if let Some(line) = unchecked_kind(&doc) {
                outcome.skipped.push(line);
                return;
            }
            let mut report = validate_document(&doc, &classes);
            if let Some(duplicate) = index.see(&doc) {
                report.errors.push(FieldError::new(
                    &report.object,
                    "metadata.name",
                    format!(
                        "the kind, namespace and name of {} again at {}",
                        duplicate.first, duplicate.second
                    ),
                ));
            } else if let Some((first, at)) = shared.see(&doc) {
                report.errors.push(FieldError::new(
                    &report.object,
                    "metadata.name",
                    shared_children_problem(&first, &at, &doc.origin),
                ));
            }
            outcome.objects.push(report);
        });
        // A file that changed between the two reads.
        if let Err(e) = read {
            outcome.unreadable.push(e.to_string());
        }
    }
    outcome
}

/// Flags of `trainscale validate`.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    /// Manifest files: YAML or JSON, one or many documents, or a List; a directory stands for
    /// its .json, .yaml and .yml files, in name order (as kubectl's `-f DIR`).
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Read the subdirectories of a directory given to -f too (as kubectl's -R).
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Treat warnings as errors (exit 1 when any object has one).
    #[arg(long)]
    pub strict: bool,
}

/// `trainscale validate`: exit code 1 when any object has an error (or, with `--strict`, a
/// warning) or a file is unreadable.
pub fn run(args: ValidateArgs) -> ExitCode {
    let (files, unreadable) = manifest_files(&args.files, args.recursive);
    let mut outcome = validate_files(&files);
    outcome.unreadable.splice(0..0, unreadable);
    print!("{}", outcome.render());
    if outcome.ok(args.strict) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

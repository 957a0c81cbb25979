//! `trainscale validate`: check TrainingJob manifests and report every problem.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::api::manifest::read_documents;
use crate::api::validate::{ObjectReport, validate_document};

/// The reports of every object in the files, and files that could not be read at all.
#[derive(Debug, Default)]
pub struct ValidationOutcome {
    pub objects: Vec<ObjectReport>,
    pub unreadable: Vec<String>,
}

impl ValidationOutcome {
    /// Whether every object is valid and every file was read.
    pub fn ok(&self) -> bool {
        self.unreadable.is_empty() && self.objects.iter().all(|o| o.problems.is_empty())
    }

    /// One line per problem, then one per valid object.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for e in &self.unreadable {
            out.push_str(&format!("error: {e}\n"));
        }
        for o in &self.objects {
            if o.problems.is_empty() {
                out.push_str(&format!("ok: {}\n", o.object));
            }
            for p in &o.problems {
                out.push_str(&format!("invalid: {p}\n"));
            }
        }
        let bad = self
            .objects
            .iter()
            .filter(|o| !o.problems.is_empty())
            .count();
        out.push_str(&format!(
            "{} object(s) checked, {} invalid\n",
            self.objects.len(),
            bad + self.unreadable.len()
        ));
        out
    }
}

/// Validates every object of every file.
pub fn validate_files(files: &[PathBuf]) -> ValidationOutcome {
    let mut outcome = ValidationOutcome::default();
    for path in files {
        match read_documents(path) {
            Ok(docs) if docs.is_empty() => outcome
                .unreadable
                .push(format!("{}: no objects found", path.display())),
            Ok(docs) => outcome.objects.extend(docs.iter().map(validate_document)),
            Err(e) => outcome.unreadable.push(e.to_string()),
        }
    }
    outcome
}

/// Flags of `trainscale validate`.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    /// Manifest files: YAML or JSON, one or many documents, or a List.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
}

/// `trainscale validate`: exit code 1 when any object is invalid or a file unreadable.
pub fn run(args: ValidateArgs) -> ExitCode {
    let outcome = validate_files(&args.files);
    print!("{}", outcome.render());
    if outcome.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

//! Errors of the simulator: each names the file, and the key or row and column, at fault.

use std::path::PathBuf;

/// Why a scenario could not be loaded or its results written.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        /// Not a `source`: the message already carries it.
        error: std::io::Error,
    },
    /// The scenario is not valid YAML.
    #[error("{path}: not valid YAML: {message}")]
    Yaml { path: PathBuf, message: String },
    /// A scenario key is unknown, of the wrong type, missing or out of range.
    #[error("{path}: key `{key}`: {message}")]
    Key {
        path: PathBuf,
        key: String,
        message: String,
    },
    /// A trace (or speedup table) row does not parse.
    #[error("{path}: row {row}, column `{column}`: {message}")]
    Row {
        path: PathBuf,
        row: usize,
        column: String,
        message: String,
    },
    /// A trace (or speedup table) is malformed as a whole (missing header or column).
    #[error("{path}: {message}")]
    Table { path: PathBuf, message: String },
    /// A plot could not be drawn.
    #[error("plot {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

impl SimError {
    pub(crate) fn key(
        path: &std::path::Path,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        SimError::Key {
            path: path.to_path_buf(),
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, error: std::io::Error) -> Self {
        SimError::Io {
            path: path.to_path_buf(),
            error,
        }
    }
}

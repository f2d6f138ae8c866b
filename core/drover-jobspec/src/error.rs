//! Errors, and the byte-span diagnostics they are built from.

use std::ops::Range;
use std::path::PathBuf;

/// Why a job file could not be turned into a job.
#[derive(Debug, thiserror::Error)]
pub enum JobspecError {
    /// The file is not well-formed HCL (or JSON).
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// The file parses but its content is not a valid job; the location points
    /// at the offending block, attribute or expression when one is known.
    #[error("{}", located(file, location, message))]
    Invalid {
        file: String,
        location: Option<(usize, usize)>,
        message: String,
    },
    /// A job or variable file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn located(file: &str, location: &Option<(usize, usize)>, message: &str) -> String {
    match location {
        Some((line, column)) => format!("{file}:{line}:{column}: {message}"),
        None => format!("{file}: {message}"),
    }
}

impl JobspecError {
    /// The file the error is about.
    pub fn file(&self) -> String {
        match self {
            JobspecError::Syntax { file, .. } | JobspecError::Invalid { file, .. } => file.clone(),
            JobspecError::Io { path, .. } => path.display().to_string(),
        }
    }

    /// One-based line of the error, when known.
    pub fn line(&self) -> Option<usize> {
        match self {
            JobspecError::Syntax { line, .. } => Some(*line),
            JobspecError::Invalid { location, .. } => location.map(|(l, _)| l),
            JobspecError::Io { .. } => None,
        }
    }

    /// One-based column (in characters) of the error, when known.
    pub fn column(&self) -> Option<usize> {
        match self {
            JobspecError::Syntax { column, .. } => Some(*column),
            JobspecError::Invalid { location, .. } => location.map(|(_, c)| c),
            JobspecError::Io { .. } => None,
        }
    }

    /// The message without the location prefix.
    pub fn message(&self) -> String {
        match self {
            JobspecError::Syntax { message, .. } | JobspecError::Invalid { message, .. } => {
                message.clone()
            }
            JobspecError::Io { source, .. } => source.to_string(),
        }
    }
}

/// A problem found while decoding, located by byte span in the source it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Diag {
    pub span: Option<Range<usize>>,
    pub summary: String,
    pub detail: String,
}

impl Diag {
    pub(crate) fn new(
        span: Option<Range<usize>>,
        summary: impl Into<String>,
        detail: impl Into<String>,
    ) -> Diag {
        Diag {
            span,
            summary: summary.into(),
            detail: detail.into(),
        }
    }

    /// `Summary; Detail`, the way Nomad prints an HCL diagnostic.
    pub(crate) fn message(&self) -> String {
        if self.detail.is_empty() {
            self.summary.clone()
        } else {
            format!("{}; {}", self.summary, self.detail)
        }
    }

    pub(crate) fn into_error(self, file: &str, src: &str) -> JobspecError {
        let location = self.span.as_ref().map(|s| line_col(src, s.start));
        JobspecError::Invalid {
            file: file.to_string(),
            location,
            message: self.message(),
        }
    }
}

pub(crate) type DResult<T> = Result<T, Diag>;

/// One-based line and character column of a byte offset (clamped to the source).
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(src.len());
    while !src.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_map_to_one_based_line_and_column() {
        let src = "ab\ncdé\nx";
        assert_eq!(line_col(src, 0), (1, 1));
        assert_eq!(line_col(src, 3), (2, 1));
        assert_eq!(line_col(src, 7), (2, 4));
        assert_eq!(line_col(src, 8), (3, 1));
        assert_eq!(line_col(src, 999), (3, 2));
    }

    #[test]
    fn invalid_errors_render_with_location_prefix() {
        let err = Diag::new(
            Some(4..7),
            "Unsupported argument",
            "An argument named \"cunt\" is not expected here.",
        )
        .into_error("job.nomad", "job\n  cunt = 1");
        assert_eq!(
            err.to_string(),
            "job.nomad:2:1: Unsupported argument; An argument named \"cunt\" is not expected here."
        );
        assert_eq!(err.line(), Some(2));
        assert_eq!(err.column(), Some(1));
    }
}

//! Nomad's multi-error text (hashicorp/go-multierror): every problem at once, one `* ` line each.

use std::fmt;

/// A list of problems, rendered exactly as go-multierror does:
/// `2 errors occurred:\n\t* first\n\t* second\n\n`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MultiError {
    pub errors: Vec<String>,
}

impl MultiError {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, e: impl Into<String>) {
        self.errors.push(e.into());
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Ok when empty, otherwise the error itself.
    pub fn into_result(self) -> Result<(), MultiError> {
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(self)
        }
    }
}

impl fmt::Display for MultiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.errors.len() == 1 {
            return write!(f, "1 error occurred:\n\t* {}\n\n", self.errors[0]);
        }
        let points: Vec<String> = self.errors.iter().map(|e| format!("* {e}")).collect();
        write!(
            f,
            "{} errors occurred:\n\t{}\n\n",
            self.errors.len(),
            points.join("\n\t")
        )
    }
}

impl std::error::Error for MultiError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_go_multierror() {
        let mut m = MultiError::new();
        m.push("a");
        assert_eq!(m.to_string(), "1 error occurred:\n\t* a\n\n");
        m.push("b");
        assert_eq!(m.to_string(), "2 errors occurred:\n\t* a\n\t* b\n\n");
    }
}

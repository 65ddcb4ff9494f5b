//! The tool's one error type: what went wrong, in words, with the cause chain kept, so a broken
//! scenario fails loudly and says why.

use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub struct Error {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl Error {
    pub fn msg(message: impl Into<String>) -> Error {
        Error { message: message.into(), source: None }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        let mut source = self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static));
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

/// Adds what the tool was doing to an error or a missing value.
pub trait Context<T> {
    fn context(self, message: impl Into<String>) -> Result<T>;
    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for Result<T, E> {
    fn context(self, message: impl Into<String>) -> Result<T> {
        self.map_err(|error| Error { message: message.into(), source: Some(Box::new(error)) })
    }

    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.map_err(|error| Error { message: message().into(), source: Some(Box::new(error)) })
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, message: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::msg(message))
    }

    fn with_context<M: Into<String>>(self, message: impl FnOnce() -> M) -> Result<T> {
        self.ok_or_else(|| Error::msg(message()))
    }
}

/// Returns early with an [`Error`] built like `format!`.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::msg(format!($($arg)*)))
    };
}

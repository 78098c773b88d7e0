//! The harness's error type: every failure from outside (DynamoDB, a child process, a socket, a
//! file) is a value that ends the run with a message, never a panic.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("DynamoDB {operation}: {message}")]
    Dynamo {
        operation: &'static str,
        message: String,
    },
    #[error(transparent)]
    Shared(#[from] shared::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Other(String),
}

impl BenchError {
    pub fn dynamo<E: std::error::Error + 'static>(operation: &'static str, err: E) -> Self {
        BenchError::Dynamo {
            operation,
            message: shared::error::error_chain(&err),
        }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        BenchError::Io {
            context: context.into(),
            source,
        }
    }
}

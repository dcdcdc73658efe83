//! What an MCP transport failure was, in words: rmcp's errors print the transport's Rust type
//! and hide the HTTP client's error, so these walk the causes instead (`error: cause: root
//! cause`), and tell a refused connection, which sent nothing, from one that failed mid-way.

use rmcp::service::ClientInitializeError;
use rmcp::transport::streamable_http_client::StreamableHttpError;

/// An error and its causes, `error: cause: root cause`, through rmcp's HTTP client error too.
pub fn with_causes(err: &(dyn std::error::Error + 'static)) -> String {
    toolplane_core::error::with_causes_by(err, cause_of)
}

/// Whether the failure was a refused connection: then no byte of the request left this process.
pub fn refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(err);
    while let Some(e) = current {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        current = cause_of(e);
    }
    false
}

/// A request's failure, without the transport's type name.
pub fn service_error(e: &rmcp::ServiceError) -> String {
    match e {
        rmcp::ServiceError::TransportSend(t) => with_causes(&*t.error),
        other => with_causes(other),
    }
}

/// An initialization's failure, without the transport's type name.
pub fn init_error(e: &ClientInitializeError) -> String {
    match e {
        ClientInitializeError::TransportError { error, context } => {
            format!("{} (trying to {context})", with_causes(&*error.error))
        }
        other => with_causes(other),
    }
}

/// The next cause of an error. rmcp's HTTP client error holds the HTTP client's error without
/// naming it as its source, so that step is taken here.
fn cause_of<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    if let Some(StreamableHttpError::Client(inner)) =
        err.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        return Some(inner);
    }
    err.source()
}

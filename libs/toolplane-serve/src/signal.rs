//! The stop signals of a toolplane process: Ctrl-C (SIGINT) or SIGTERM. Every service binary and
//! `toolplane up` stop on these and nothing else.

use std::future::Future;

/// Ctrl-C or SIGTERM, caught from the moment [`Signals::listen`] is called (until then either
/// ends the process at once, as during a start). Each [`Signals::recv`] waits for the next one,
/// so a second Ctrl-C during a graceful stop can be told apart.
#[derive(Debug)]
pub struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers now. Must be called inside a tokio runtime with its IO driver.
    pub fn listen() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    /// The next Ctrl-C or SIGTERM.
    pub async fn recv(&mut self) {
        #[cfg(unix)]
        {
            match (&mut self.interrupt, &mut self.terminate) {
                (Some(int), Some(term)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                }
                (Some(int), None) => {
                    int.recv().await;
                }
                (None, Some(term)) => {
                    term.recv().await;
                }
                // Neither handler could be installed: fall back to tokio's own Ctrl-C.
                (None, None) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Resolves on the first Ctrl-C or SIGTERM. The handlers are installed when this is called, not
/// when the future is first polled, so a signal that arrives between a service printing its
/// address and awaiting this is a clean stop rather than the process killed.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    let mut signals = Signals::listen();
    async move { signals.recv().await }
}

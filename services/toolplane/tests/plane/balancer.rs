//! A TCP load balancer on loopback, as a Kubernetes Service is to the pods behind it: each
//! connection goes to the next backend that accepts it, round robin, and lives as long as that
//! backend's end does. Tests point clients at it and change the backends as replicas come and go.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

pub struct Balancer {
    addr: SocketAddr,
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    pub async fn start() -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let backends: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let next = Arc::new(AtomicUsize::new(0));
        let list = Arc::clone(&backends);
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let list = list.lock().unwrap().clone();
                let first = next.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    for i in 0..list.len() {
                        let backend = list[(first + i) % list.len()];
                        if let Ok(mut up) = TcpStream::connect(backend).await {
                            let _ = up.set_nodelay(true);
                            let _ = down.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                            return;
                        }
                    }
                });
            }
        });
        Balancer {
            addr,
            backends,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// New connections go to these backends from now on; open ones stay where they are.
    pub fn set(&self, backends: &[SocketAddr]) {
        *self.backends.lock().unwrap() = backends.to_vec();
    }
}

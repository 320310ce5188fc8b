//! Accepted connections, plain or TLS, as tonic serves them: Nagle off,
//! TLS handshakes off the accept loop (a slow or silent client delays no
//! one else), and the peer's address and certificates at hand for every
//! request.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use rustls::pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::coalesced_writes::CoalescedWrites;
use super::identity::{roles_of, Role};

/// A TLS handshake taking longer than this is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS handshakes in progress at once; beyond, accepting waits, so a flood
/// of connections that never finish their handshake is bounded.
const MAX_HANDSHAKES: usize = 256;

pub enum Conn {
    Plain(CoalescedWrites<TcpStream>),
    Tls(Box<TlsStream<CoalescedWrites<TcpStream>>>),
}

/// What a handler can know of the connection a request came on.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub remote: Option<SocketAddr>,
    /// The client's certificate chain (TLS with client certificates).
    pub peer_certs: Option<Arc<Vec<CertificateDer<'static>>>>,
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        match self {
            Conn::Plain(tcp) => ConnInfo {
                remote: tcp.get_ref().peer_addr().ok(),
                peer_certs: None,
            },
            Conn::Tls(tls) => {
                let (tcp, session) = tls.get_ref();
                ConnInfo {
                    remote: tcp.get_ref().peer_addr().ok(),
                    peer_certs: session.peer_certificates().map(|certs| {
                        Arc::new(certs.iter().map(|c| c.clone().into_owned()).collect())
                    }),
                }
            }
        }
    }
}

/// The client's address, on any kind of connection.
pub fn remote_addr<T>(request: &tonic::Request<T>) -> Option<SocketAddr> {
    request
        .extensions()
        .get::<ConnInfo>()
        .and_then(|info| info.remote)
        .or_else(|| request.remote_addr())
}

/// The cluster roles the client's certificate names (none without one).
pub fn peer_roles<T>(request: &tonic::Request<T>) -> Vec<Role> {
    request
        .extensions()
        .get::<ConnInfo>()
        .and_then(|info| info.peer_certs.as_ref())
        .and_then(|chain| chain.first())
        .map(roles_of)
        .unwrap_or_default()
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain(s) => s.is_write_vectored(),
            Conn::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The connections accepted on `listener`, TLS ones when `tls` is given,
/// their socket writes merged (see `coalesced_writes`). The listener
/// closes when the stream is dropped (the server stopped).
pub fn incoming(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> impl Stream<Item = io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Conn>>(64);
    let acceptor = tls.map(TlsAcceptor::from);
    let handshakes = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                _ = tx.closed() => return,
            };
            let (tcp, remote) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors and the like: wait, then go on.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let Some(acceptor) = acceptor.clone() else {
                if tx
                    .send(Ok(Conn::Plain(CoalescedWrites::new(tcp))))
                    .await
                    .is_err()
                {
                    return;
                }
                continue;
            };
            let Ok(permit) = Arc::clone(&handshakes).acquire_owned().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let _permit = permit;
                // Merging starts after the handshake (see coalesced_writes).
                let tcp = CoalescedWrites::passthrough(tcp);
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                    Ok(Ok(mut tls)) => {
                        tls.get_mut().0.start_merging();
                        let _ = tx.send(Ok(Conn::Tls(Box::new(tls)))).await;
                    }
                    Ok(Err(e)) => tracing::debug!(%remote, "TLS handshake failed: {e}"),
                    Err(_) => tracing::debug!(%remote, "TLS handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

//! A client that stops reading is cut off: a connection's writes may wait
//! for the client (its socket's buffers full) only as long as the client
//! goes on taking something of what was sent.
//!
//! Progress is what the client's TCP acknowledges (`TCP_INFO`'s
//! `tcpi_bytes_acked`), not when a waiting write resumes: the kernel
//! wakes a writer only once a third of a send buffer of up to 4 MiB has
//! drained, so a slow reader would be taken for a stalled one.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// An accepted connection whose writes fail with `TimedOut` once one has
/// waited `stall` with no byte acknowledged by the client meanwhile.
pub(crate) struct StallGuard {
    stream: TcpStream,
    stall: Duration,
    /// While a write waits: when to look at the client's progress next,
    /// the bytes it had acknowledged when last looked at, and when they
    /// last grew.
    waiting: Option<Waiting>,
}

struct Waiting {
    look: Pin<Box<Sleep>>,
    acked: Option<u64>,
    moved: Instant,
}

/// How many times per stall a waiting write looks at the client's
/// progress: a stall is noticed within a quarter of it.
const LOOKS_PER_STALL: u32 = 4;

impl StallGuard {
    pub(crate) fn new(stream: TcpStream, stall: Duration) -> Self {
        StallGuard {
            stream,
            stall,
            waiting: None,
        }
    }

    /// A write is waiting: fail once the client has taken nothing for
    /// `stall`.
    fn check(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let stall = self.stall;
        let every = (stall / LOOKS_PER_STALL).max(Duration::from_millis(100));
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.stream);
        let waiting = self.waiting.get_or_insert_with(|| Waiting {
            look: Box::pin(tokio::time::sleep(every)),
            acked: bytes_acked(fd),
            moved: Instant::now(),
        });
        while waiting.look.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            let acked = bytes_acked(fd);
            if acked.is_some() && acked != waiting.acked {
                waiting.acked = acked;
                waiting.moved = now;
            } else if now.duration_since(waiting.moved) >= stall {
                // Reset, not closed in order: the kernel would otherwise
                // keep what is queued (up to 4 MiB) for the client.
                set_linger_zero(fd);
                tracing::info!(
                    stall_secs = stall.as_secs(),
                    "a client took nothing of its answer for server.write_stall_secs; its connection is closed"
                );
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the client took nothing of the answer for {} s (server.write_stall_secs)",
                        stall.as_secs()
                    ),
                ));
            }
            waiting.look.as_mut().reset(now + every);
        }
        Ok(())
    }

    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => match self.check(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            ready => {
                self.waiting = None;
                ready
            }
        }
    }
}

/// Make closing the socket reset the connection, dropping what the kernel
/// still holds for it (best effort).
fn set_linger_zero(fd: std::os::fd::RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket the guard owns, with a pointer to a
    // live linger and its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Bytes of what was sent that the peer has acknowledged, when the kernel
/// tells.
fn bytes_acked(fd: std::os::fd::RawFd) -> Option<u64> {
    // SAFETY: an all-zero tcp_info is a valid value (plain integers).
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt on a socket the guard owns, into a live tcp_info
    // whose size is passed.
    let failed = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    } != 0;
    (!failed).then_some(info.tcpi_bytes_acked)
}

impl AsyncRead for StallGuard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let r = Pin::new(&mut self.stream).poll_flush(cx);
        self.after_write(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

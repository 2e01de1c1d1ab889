//! [`Rewind`]: a connection read ahead to decide how to serve it (an h2c
//! preface, a PROXY header), whose bytes read past that decision are read
//! again first by whatever serves it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose first bytes, already read, are read again first.
pub(crate) struct Rewind<T> {
    io: T,
    prefix: Vec<u8>,
    taken: usize,
}

impl<T> Rewind<T> {
    /// `io`, whose first bytes `prefix` were read from it already.
    pub(super) fn new(io: T, prefix: Vec<u8>) -> Self {
        Self {
            io,
            prefix,
            taken: 0,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.taken < this.prefix.len() {
            let left = &this.prefix[this.taken..];
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.taken += n;
            if this.taken == this.prefix.len() {
                this.prefix = Vec::new();
                this.taken = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

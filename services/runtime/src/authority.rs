//! Any `:authority` on a Unix socket. gRPC C-core clients (Python `grpcio`, C++, Ruby, C#,
//! PHP) send the socket's path, percent-encoded, as the HTTP/2 `:authority`
//! (`tmp%2Fx%2Fcsi.sock`); the `h2` server parses it as a URI authority, finds `%` outside
//! a userinfo or IPv6 zone, and resets the stream with PROTOCOL_ERROR before any handler
//! runs. A server on a Unix socket has no use for the authority, so every connection is
//! read through [`Lenient`]: it decodes each request header block (HPACK, with the
//! client's dynamic table), replaces an `:authority` that is not a valid URI authority with
//! `localhost`, and hands `h2` the block re-encoded as literals without indexing — so
//! `h2`'s own table stays empty and never disagrees with the client's. Everything else
//! passes through byte for byte. Whatever it cannot parse it passes on unchanged from then
//! on, for `h2` to judge as it would have.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The smallest SETTINGS_MAX_FRAME_SIZE a peer may have: re-encoded blocks are split to it.
const MAX_FRAME: usize = 16_384;
/// The most header block collected before giving up on it: past it (a CONTINUATION flood)
/// the frames go to h2 as they are, whose own limits then apply; nothing grows here.
const MAX_BLOCK: usize = 256 * 1024;
/// What an unusable `:authority` becomes.
const REPLACEMENT: &[u8] = b"localhost";

/// A header block being collected from HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
}

enum State {
    /// Bytes of the client preface seen so far.
    Preface(usize),
    Frames,
    /// Something did not parse: from here on, bytes pass unchanged.
    Passthrough,
}

/// A connection whose request header blocks are rewritten as the module says.
pub struct Lenient<S> {
    inner: S,
    state: State,
    /// Read from `inner`, not yet processed.
    raw: Vec<u8>,
    /// Processed, for the reader.
    out: Vec<u8>,
    block: Option<Block>,
    decoder: loona_hpack::Decoder<'static>,
    eof: bool,
}

impl<S> Lenient<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            state: State::Preface(0),
            raw: Vec::new(),
            out: Vec::new(),
            block: None,
            decoder: loona_hpack::Decoder::new(),
            eof: false,
        }
    }

    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Moves what `raw` holds into `out`, rewriting header blocks; leaves an incomplete
    /// frame in `raw`.
    fn process(&mut self) {
        loop {
            match self.state {
                State::Passthrough => {
                    self.out.append(&mut self.raw);
                    return;
                }
                State::Preface(seen) => {
                    let want = PREFACE.len() - seen;
                    let n = want.min(self.raw.len());
                    if self.raw[..n] != PREFACE[seen..seen + n] {
                        self.state = State::Passthrough;
                        continue;
                    }
                    self.out.extend(self.raw.drain(..n));
                    if n < want {
                        self.state = State::Preface(seen + n);
                        return;
                    }
                    self.state = State::Frames;
                }
                State::Frames => {
                    if self.raw.len() < FRAME_HEADER {
                        return;
                    }
                    let len = (usize::from(self.raw[0]) << 16)
                        | (usize::from(self.raw[1]) << 8)
                        | usize::from(self.raw[2]);
                    // The servers advertise the default SETTINGS_MAX_FRAME_SIZE: a larger
                    // frame is h2's to refuse, and is not worth holding in memory here.
                    if len > MAX_FRAME {
                        self.give_up();
                        continue;
                    }
                    if self.raw.len() < FRAME_HEADER + len {
                        return;
                    }
                    let kind = self.raw[3];
                    if kind != HEADERS && kind != CONTINUATION {
                        if self.block.is_some() {
                            // Only CONTINUATION may follow an unfinished block.
                            self.give_up();
                            continue;
                        }
                        self.out.extend(self.raw.drain(..FRAME_HEADER + len));
                        continue;
                    }
                    let frame: Vec<u8> = self.raw.drain(..FRAME_HEADER + len).collect();
                    if !self.header_frame(&frame) {
                        // Put the frame back in front and pass everything on as it came.
                        let mut rest = std::mem::take(&mut self.raw);
                        self.raw = frame;
                        self.raw.append(&mut rest);
                        self.give_up();
                    }
                }
            }
        }
    }

    /// A HEADERS or CONTINUATION frame; `false` when it cannot be handled.
    fn header_frame(&mut self, frame: &[u8]) -> bool {
        let (kind, flags) = (frame[3], frame[4]);
        let stream = u32::from_be_bytes([frame[5], frame[6], frame[7], frame[8]]) & 0x7fff_ffff;
        let mut payload = &frame[FRAME_HEADER..];
        match (kind, &mut self.block) {
            (HEADERS, None) => {
                if flags & PADDED != 0 {
                    let Some((&pad, rest)) = payload.split_first() else {
                        return false;
                    };
                    let Some(end) = rest.len().checked_sub(usize::from(pad)) else {
                        return false;
                    };
                    payload = &rest[..end];
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    let Some((p, rest)) = payload.split_first_chunk::<5>() else {
                        return false;
                    };
                    priority = Some(*p);
                    payload = rest;
                }
                self.block = Some(Block {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment: payload.to_vec(),
                });
            }
            (CONTINUATION, Some(b))
                if b.stream == stream && b.fragment.len() + payload.len() <= MAX_BLOCK =>
            {
                b.fragment.extend_from_slice(payload)
            }
            _ => return false,
        }
        if flags & END_HEADERS == 0 {
            return true;
        }
        let Some(block) = self.block.take() else {
            return false;
        };
        let Ok(headers) = self.decoder.decode(&block.fragment) else {
            // Put back what was taken: h2 judges the original.
            self.block = Some(block);
            return false;
        };
        let mut encoded = Vec::with_capacity(block.fragment.len() + 64);
        for (name, value) in &headers {
            let value: &[u8] = if name == b":authority" && !valid_authority(value) {
                REPLACEMENT
            } else {
                value
            };
            encoded.push(0x00); // literal without indexing, new name
            literal(&mut encoded, name);
            literal(&mut encoded, value);
        }
        self.emit(&block, &encoded);
        true
    }

    /// Writes `encoded` as a HEADERS frame and as many CONTINUATION frames as it needs.
    fn emit(&mut self, block: &Block, encoded: &[u8]) {
        let prefix = if block.priority.is_some() { 5 } else { 0 };
        let first = encoded.len().min(MAX_FRAME - prefix);
        let mut flags = if block.end_stream { END_STREAM } else { 0 };
        if block.priority.is_some() {
            flags |= PRIORITY;
        }
        if first == encoded.len() {
            flags |= END_HEADERS;
        }
        frame_header(&mut self.out, first + prefix, HEADERS, flags, block.stream);
        if let Some(p) = block.priority {
            self.out.extend_from_slice(&p);
        }
        self.out.extend_from_slice(&encoded[..first]);
        let mut rest = &encoded[first..];
        while !rest.is_empty() {
            let n = rest.len().min(MAX_FRAME);
            let flags = if n == rest.len() { END_HEADERS } else { 0 };
            frame_header(&mut self.out, n, CONTINUATION, flags, block.stream);
            self.out.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
    }

    /// From here on everything passes unchanged, starting with an unfinished block's
    /// frames as they came (already lost to re-encoding: h2 then fails the connection,
    /// as it would have on such input).
    fn give_up(&mut self) {
        self.block = None;
        self.state = State::Passthrough;
    }
}

fn valid_authority(value: &[u8]) -> bool {
    !value.is_empty() && hyper::http::uri::Authority::try_from(value).is_ok()
}

fn frame_header(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = len as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// An HPACK string literal without Huffman coding: a 7-bit-prefix length, the bytes.
fn literal(out: &mut Vec<u8>, s: &[u8]) {
    let mut n = s.len();
    if n < 127 {
        out.push(n as u8);
    } else {
        out.push(127);
        n -= 127;
        while n >= 128 {
            out.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        out.push(n as u8);
    }
    out.extend_from_slice(s);
}

impl<S: AsyncRead + Unpin> AsyncRead for Lenient<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                buf.put_slice(&this.out[..n]);
                this.out.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // Whatever incomplete frame is left goes on as it is: h2 judges it.
                if !this.raw.is_empty() {
                    this.out.append(&mut this.raw);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16_384];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    if read.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.raw.extend_from_slice(read.filled());
                        this.process();
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Lenient<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected for Lenient<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The connections of `listener`, each read through [`Lenient`]: pass to tonic's
/// `serve_with_incoming*`.
pub fn incoming(listener: UnixListener) -> impl Stream<Item = io::Result<Lenient<UnixStream>>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::UnixListenerStream::new(listener).map(|c| c.map(Lenient::new))
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// A client's bytes through the shim, read to the end.
    async fn through(bytes: Vec<u8>) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        tokio::io::AsyncWriteExt::write_all(&mut client, &bytes)
            .await
            .unwrap();
        drop(client);
        let mut lenient = Lenient::new(server);
        let mut out = Vec::new();
        lenient.read_to_end(&mut out).await.unwrap();
        out
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        frame_header(&mut out, payload.len(), kind, flags, stream);
        out.extend_from_slice(payload);
        out
    }

    /// The header blocks of `bytes` (after the preface), decoded with a fresh decoder
    /// as h2 would.
    fn blocks(bytes: &[u8]) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut d = loona_hpack::Decoder::new();
        let mut rest = &bytes[PREFACE.len()..];
        let mut out = Vec::new();
        let mut pending = Vec::new();
        while rest.len() >= FRAME_HEADER {
            let len =
                (usize::from(rest[0]) << 16) | (usize::from(rest[1]) << 8) | usize::from(rest[2]);
            let (kind, flags) = (rest[3], rest[4]);
            let payload = &rest[FRAME_HEADER..FRAME_HEADER + len];
            if kind == HEADERS || kind == CONTINUATION {
                let skip = if kind == HEADERS && flags & PRIORITY != 0 {
                    5
                } else {
                    0
                };
                pending.extend_from_slice(&payload[skip..]);
                if flags & END_HEADERS != 0 {
                    out.push(d.decode(&pending).unwrap());
                    pending.clear();
                }
            }
            rest = &rest[FRAME_HEADER + len..];
        }
        out
    }

    fn authority(block: &[(Vec<u8>, Vec<u8>)]) -> String {
        block
            .iter()
            .find(|(n, _)| n == b":authority")
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn a_c_core_authority_becomes_localhost_and_the_rest_passes_as_it_was() {
        // As a C-core client encodes: incremental indexing, Huffman where it pays, the
        // second request referring to the first one's dynamic-table entries.
        let mut enc = loona_hpack::Encoder::new();
        let request = |authority: &'static [u8]| -> Vec<(&'static [u8], &'static [u8])> {
            vec![
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", b"/csi.v1.Identity/GetPluginInfo"),
                (b":authority", authority),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
            ]
        };
        let first = enc.encode(request(b"tmp%2Fx%2Fcsi.sock"));
        let second = enc.encode(request(b"tmp%2Fx%2Fcsi.sock"));
        let third = enc.encode(request(b"example.org:80"));
        let data = frame(0x0, END_STREAM, 1, &[0, 0, 0, 0, 0]);
        let mut input = PREFACE.to_vec();
        input.extend(frame(0x4, 0, 0, &[]));
        input.extend(frame(HEADERS, END_HEADERS, 1, &first));
        input.extend(&data);
        // The second block split over HEADERS (padded, with priority) and CONTINUATION.
        let mut padded = vec![3u8];
        padded.extend([0, 0, 0, 0, 16]);
        padded.extend(&second[..4]);
        padded.extend([0, 0, 0]);
        input.extend(frame(HEADERS, PADDED | PRIORITY | END_STREAM, 3, &padded));
        input.extend(frame(CONTINUATION, END_HEADERS, 3, &second[4..]));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &third));
        let out = through(input).await;
        assert!(out.starts_with(PREFACE));
        let decoded = blocks(&out);
        assert_eq!(decoded.len(), 3);
        assert_eq!(authority(&decoded[0]), "localhost");
        assert_eq!(authority(&decoded[1]), "localhost");
        assert_eq!(
            authority(&decoded[2]),
            "example.org:80",
            "a valid authority is kept"
        );
        for b in &decoded {
            assert_eq!(b.len(), 6);
            assert!(b.contains(&(
                b":path".to_vec(),
                b"/csi.v1.Identity/GetPluginInfo".to_vec()
            )));
        }
        // Non-header frames are untouched.
        let data_at = out.windows(data.len()).position(|w| w == data);
        assert!(data_at.is_some());
    }

    #[tokio::test]
    async fn an_oversized_frame_is_passed_on_not_buffered() {
        let mut input = PREFACE.to_vec();
        // Announces 16 MiB - 1 and sends a little: h2 refuses it; the shim must not wait
        // for the rest (the client is still connected), nor hold it.
        input.extend([0xff, 0xff, 0xff, 0x0, 0x0, 0, 0, 0, 1]);
        input.extend([1, 2, 3]);
        let (mut client, server) = tokio::io::duplex(1 << 20);
        tokio::io::AsyncWriteExt::write_all(&mut client, &input)
            .await
            .unwrap();
        let mut lenient = Lenient::new(server);
        let mut out = vec![0u8; input.len()];
        tokio::time::timeout(
            std::time::Duration::from_secs(2),
            lenient.read_exact(&mut out),
        )
        .await
        .expect("passed on at once")
        .unwrap();
        assert_eq!(out, input);
        drop(client);
    }

    /// A header block that never ends is not collected without bound: past MAX_BLOCK the
    /// shim stops collecting and passes the rest on as it comes.
    #[tokio::test]
    async fn a_continuation_flood_is_not_collected() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let mut lenient = Lenient::new(server);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            client.write_all(PREFACE).await.unwrap();
            client
                .write_all(&frame(HEADERS, 0, 1, &[0x82]))
                .await
                .unwrap();
            let junk = frame(CONTINUATION, 0, 1, &[0u8; MAX_FRAME]);
            for _ in 0..(4 * MAX_BLOCK / MAX_FRAME) {
                if client.write_all(&junk).await.is_err() {
                    return;
                }
            }
        });
        // Reading goes on while the flood comes: the shim passes bytes on long before the
        // flood ends, and what it holds stays under its bound.
        let mut out = vec![0u8; 64 * 1024];
        let mut passed = 0;
        while passed < 2 * MAX_BLOCK {
            let n = tokio::time::timeout(std::time::Duration::from_secs(2), lenient.read(&mut out))
                .await
                .expect("bytes keep flowing")
                .unwrap();
            assert!(n > 0);
            passed += n;
            let held = lenient.raw.len() + lenient.block.as_ref().map_or(0, |b| b.fragment.len());
            assert!(
                held <= MAX_BLOCK + MAX_FRAME + FRAME_HEADER,
                "{held} bytes held"
            );
        }
        writer.abort();
    }

    #[tokio::test]
    async fn what_is_not_http2_passes_unchanged() {
        let bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(through(bytes.clone()).await, bytes);
        // A broken header block: passed on as it came, for h2 to refuse.
        let mut input = PREFACE.to_vec();
        let bad = frame(HEADERS, END_HEADERS, 1, &[0xff, 0xff, 0xff, 0xff]);
        input.extend(&bad);
        input.extend(frame(0x0, END_STREAM, 1, b"x"));
        assert_eq!(through(input.clone()).await, input);
    }
}

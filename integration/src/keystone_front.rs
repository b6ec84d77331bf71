//! Keystone behind a login cache, for the tests whose subject is not the login: a
//! repeated password login (`POST /v3/auth/tokens` with the same body) is answered with
//! the token Keystone issued for the first — its status, headers (`X-Subject-Token`) and
//! body as Keystone gave them — for [`KEPT`]; every other request passes to Keystone.
//!
//! Why: the simulator's Keystone is one single-threaded process whose every answer costs
//! ~0.7 CPU-seconds (CI of issue 72: 734 CPU-seconds for 1,050 requests), and each new token
//! is validated again by every service it reaches. The OpenStack layouts' tests run
//! Terraform ~60 times, each run a login and then a validation at Nova, Neutron, Cinder
//! and Glance: ~60 Keystone requests a minute, the lane's floor. Through this front each
//! project logs in once and the services validate its token once each. What the provider
//! does is unchanged — it logs in with its password at every run and reads the answer
//! Keystone gave. Not for tests whose subject is Keystone (a paused Keystone, a catalog a
//! test changes under a running binary): the clouds' OpenStack tests never come here. A
//! test that changes the catalog calls [`forget_logins`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

/// How long a login's answer is given again: half Keystone's default token lifetime (an
/// hour; the simulator's configuration keeps it), far longer than a CI run's lane.
pub const KEPT: Duration = Duration::from_secs(30 * 60);

type Answer = (hyper::http::response::Parts, Bytes);

struct Front {
    addr: SocketAddr,
    upstream: SocketAddr,
    logins: Arc<Mutex<Logins>>,
}

#[derive(Default)]
struct Logins {
    /// By the request's path, query and body: when Keystone answered, and what.
    answers: HashMap<Vec<u8>, (Instant, Answer)>,
    /// Logins passed to Keystone, and answered here.
    passed: usize,
    repeated: usize,
}

static FRONT: OnceLock<Front> = OnceLock::new();

/// `auth_url` (an `http://127.0.0.1:<port>/…` Keystone URL) through the process's login
/// cache: the same path on the front's port. The front starts with the first call, on a
/// thread of its own, and lives as long as the process.
pub fn cached(auth_url: &str) -> String {
    let rest = auth_url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("the login cache fronts an http:// Keystone, not {auth_url}"));
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let upstream: SocketAddr = host
        .parse()
        .unwrap_or_else(|e| panic!("Keystone's address {host}: {e}"));
    let front = FRONT.get_or_init(|| start(upstream));
    assert_eq!(front.upstream, upstream, "one Keystone per process");
    format!("http://{}/{path}", front.addr)
}

/// Every login answered so far forgotten: the next of each goes to Keystone. A token
/// carries the catalog of its login — after a test adds or removes a region or an
/// endpoint, a token issued before would not show it.
pub fn forget_logins() {
    if let Some(f) = FRONT.get() {
        f.logins.lock().unwrap().answers.clear();
    }
}

/// (logins passed to Keystone, logins answered again) so far.
pub fn logins() -> (usize, usize) {
    FRONT.get().map_or((0, 0), |f| {
        let l = f.logins.lock().unwrap();
        (l.passed, l.repeated)
    })
}

fn start(upstream: SocketAddr) -> Front {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let logins = Arc::new(Mutex::new(Logins::default()));
    let kept = Arc::clone(&logins);
    std::thread::Builder::new()
        .name("keystone-front".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let kept = Arc::clone(&kept);
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let kept = Arc::clone(&kept);
                            async move { Ok::<_, Infallible>(answer(req, upstream, &kept).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        })
        .expect("thread");
    Front {
        addr,
        upstream,
        logins,
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    upstream: SocketAddr,
    logins: &Mutex<Logins>,
) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let login = parts.method == hyper::Method::POST && parts.uri.path().ends_with("/auth/tokens");
    let key = login.then(|| {
        let mut key = parts
            .uri
            .path_and_query()
            .map_or("", |p| p.as_str())
            .as_bytes()
            .to_vec();
        key.push(b'\n');
        key.extend_from_slice(&body);
        key
    });
    if let Some(key) = &key {
        let mut l = logins.lock().unwrap();
        if let Some((at, (head, bytes))) = l.answers.get(key) {
            if at.elapsed() < KEPT {
                let response = rebuilt(head, bytes.clone());
                l.repeated += 1;
                return response;
            }
        }
    }
    // The Host header stays the front's: Keystone's version document links to where it
    // was asked, and a client following it stays behind the front.
    let forwarded = hyper::Request::from_parts(parts, Full::new(body));
    match crate::faulty_front::forward(upstream, forwarded).await {
        Ok((head, bytes)) => {
            let response = rebuilt(&head, bytes.clone());
            if let Some(key) = key {
                let mut l = logins.lock().unwrap();
                l.passed += 1;
                // Only a token issued: a refusal (401, 404) is asked again every time.
                if head.status == hyper::StatusCode::CREATED {
                    l.answers.insert(key, (Instant::now(), (head, bytes)));
                }
            }
            response
        }
        Err(why) => hyper::Response::builder()
            .status(502)
            .body(Full::new(Bytes::from(why)))
            .expect("response"),
    }
}

/// Keystone's answer as it gave it, its length counted again.
fn rebuilt(head: &hyper::http::response::Parts, body: Bytes) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::builder().status(head.status);
    for (name, value) in &head.headers {
        if name != hyper::header::CONTENT_LENGTH
            && name != hyper::header::TRANSFER_ENCODING
            && name != hyper::header::CONNECTION
        {
            response = response.header(name, value);
        }
    }
    response.body(Full::new(body)).expect("response")
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A stand-in Keystone: each login answered 201 with a new token (`tok-<n>`), one whose
    /// body says `wrong` 401; every request counted.
    fn keystone() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let n = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let mut stream = stream.unwrap();
                let request = read_message(&mut stream);
                let i = n.fetch_add(1, Ordering::SeqCst) + 1;
                let answer = if request.contains("wrong") {
                    "HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
                        .to_owned()
                } else {
                    let body = format!("{{\"token\": {{\"n\": {i}}}}}");
                    format!(
                        "HTTP/1.1 201 Created\r\nX-Subject-Token: tok-{i}\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                };
                stream.write_all(answer.as_bytes()).unwrap();
            }
        });
        (addr, asked)
    }

    /// One HTTP/1.1 message's head and body (by its Content-Length).
    fn read_message(stream: &mut TcpStream) -> String {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).unwrap() == 0 {
                break;
            }
            buf.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&buf).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).unwrap();
        head + &String::from_utf8_lossy(&body)
    }

    /// A login through `url` with `body`: (status line, X-Subject-Token).
    fn login(url: &str, body: &str) -> (String, String) {
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut stream = TcpStream::connect(host).unwrap();
        write!(
            stream,
            "POST /{path}/auth/tokens HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer.lines().next().unwrap_or_default().to_owned();
        let token = answer
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("x-subject-token")
                    .then(|| v.trim().to_owned())
            })
            .unwrap_or_default();
        (status, token)
    }

    #[test]
    fn a_repeated_login_is_answered_with_keystone_s_first_token_until_forgotten() {
        let (keystone, asked) = keystone();
        let url = cached(&format!("http://{keystone}/v3"));
        assert_ne!(url, format!("http://{keystone}/v3"), "through the front");

        let first = login(&url, r#"{"project": "a"}"#);
        assert!(first.0.contains("201"), "{first:?}");
        assert_eq!(login(&url, r#"{"project": "a"}"#), first, "the same answer");
        assert_eq!(asked.load(Ordering::SeqCst), 1, "Keystone asked once");

        // Another body (another project or user) is another login.
        let other = login(&url, r#"{"project": "b"}"#);
        assert_ne!(other.1, first.1);
        assert_eq!(asked.load(Ordering::SeqCst), 2);

        // A refusal is never given again: every one goes to Keystone.
        for _ in 0..2 {
            assert!(login(&url, r#"{"password": "wrong"}"#).0.contains("401"));
        }
        assert_eq!(asked.load(Ordering::SeqCst), 4);

        // Forgotten (a catalog changed): the next login is Keystone's again.
        forget_logins();
        let again = login(&url, r#"{"project": "a"}"#);
        assert_ne!(again.1, first.1, "a new token");
        assert_eq!(asked.load(Ordering::SeqCst), 5);
        assert_eq!(logins(), (5, 1));
    }
}

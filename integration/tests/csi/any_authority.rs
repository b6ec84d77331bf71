//! Every gRPC server of the suite on a Unix socket (the CSI driver's, the registrar's)
//! answers a client that sends the socket's path, percent-encoded, as `:authority` — what
//! gRPC C-core clients (Python grpcio, C++, Ruby, C#, PHP) do. Before, h2 reset every such
//! stream with PROTOCOL_ERROR before a handler ran.
//!
//! Two clients: a raw HTTP/2 one written here (sends exactly that authority, checks the
//! answer frame by frame; always runs), and Python's grpcio, a real C-core client, when
//! `python3` can import `grpc` (`.ci/run` installs Debian's python3-grpcio; otherwise it
//! says it was skipped).

use std::path::Path;
use std::time::Duration;

use overcast_integration::{eventually, say_skipped, Csi, Registrar};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const NAME: &str = "authority.csi.overcast.dev";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn literal(out: &mut Vec<u8>, s: &[u8]) {
    assert!(s.len() < 127);
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

/// What the server answered one unary call with an empty request message.
#[derive(Debug, Default)]
struct Answer {
    reset: Option<u32>,
    message: Vec<u8>,
    trailers: Vec<(String, String)>,
}

/// A unary call with an empty message over raw HTTP/2, `:authority` as given.
async fn call(socket: &Path, path: &str, authority: &str) -> Answer {
    let mut conn = UnixStream::connect(socket).await.expect("connect");
    let mut block = Vec::new();
    for (n, v) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0x00);
        literal(&mut block, n.as_bytes());
        literal(&mut block, v.as_bytes());
    }
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[]));
    out.extend(frame(0x1, 0x4, 1, &block));
    out.extend(frame(0x0, 0x1, 1, &[0, 0, 0, 0, 0]));
    conn.write_all(&out).await.unwrap();
    let mut answer = Answer::default();
    let mut decoder = loona_hpack::Decoder::new();
    let mut headers_seen = 0;
    let read = async {
        loop {
            let mut head = [0u8; 9];
            if conn.read_exact(&mut head).await.is_err() {
                return;
            }
            let len =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            conn.read_exact(&mut payload).await.unwrap();
            let (kind, flags) = (head[3], head[4]);
            match kind {
                0x4 if flags & 0x1 == 0 => {
                    conn.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap();
                }
                0x3 => {
                    answer.reset = Some(u32::from_be_bytes(payload[..4].try_into().unwrap()));
                    return;
                }
                0x0 => answer.message.extend_from_slice(&payload),
                0x1 => {
                    let decoded = decoder.decode(&payload).expect("hpack");
                    headers_seen += 1;
                    if headers_seen > 1 || flags & 0x1 != 0 {
                        answer.trailers = decoded
                            .into_iter()
                            .map(|(n, v)| {
                                (
                                    String::from_utf8_lossy(&n).into(),
                                    String::from_utf8_lossy(&v).into(),
                                )
                            })
                            .collect();
                    }
                    if flags & 0x1 != 0 {
                        return;
                    }
                }
                _ => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer");
    answer
}

fn grpc_status(a: &Answer) -> Option<&str> {
    a.trailers
        .iter()
        .find(|(n, _)| n == "grpc-status")
        .map(|(_, v)| v.as_str())
}

/// The authority C-core derives from a socket path: the path without its leading slash,
/// percent-encoded.
fn c_core_authority(socket: &Path) -> String {
    socket
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "%2F")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_csi_and_registrar_sockets_answer_any_authority() {
    let csi = Csi::start(&[&format!("--driver-name={NAME}")]).await;
    let registrar = Registrar::start(&csi.socket, csi.dir.path());
    let reg_socket = registrar.registry.join(format!("{NAME}-reg.sock"));
    assert!(
        eventually(Duration::from_secs(10), || reg_socket.exists()).await,
        "{}",
        registrar.log_text()
    );

    for authority in [
        c_core_authority(&csi.socket),
        csi.socket.display().to_string(),
        "localhost".into(),
    ] {
        let a = call(&csi.socket, "/csi.v1.Identity/GetPluginInfo", &authority).await;
        assert_eq!(
            a.reset, None,
            "CSI socket reset the stream for :authority {authority}"
        );
        assert_eq!(grpc_status(&a), Some("0"), "{authority}: {a:?}");
        assert!(
            a.message.windows(NAME.len()).any(|w| w == NAME.as_bytes()),
            "{a:?}"
        );
        let a = call(
            &reg_socket,
            "/pluginregistration.Registration/GetInfo",
            &authority,
        )
        .await;
        assert_eq!(
            a.reset, None,
            "registration socket reset the stream for :authority {authority}"
        );
        assert_eq!(grpc_status(&a), Some("0"), "{authority}: {a:?}");
        assert!(
            a.message.windows(NAME.len()).any(|w| w == NAME.as_bytes()),
            "{a:?}"
        );
    }

    // A real C-core client.
    let python = "/usr/bin/python3";
    let has_grpcio = std::process::Command::new(python)
        .args(["-c", "import grpc"])
        .status()
        .is_ok_and(|s| s.success());
    if !has_grpcio {
        say_skipped("the grpcio client: /usr/bin/python3 cannot import grpc (apt-get install python3-grpcio)");
        return;
    }
    let script = r#"
import grpc, sys
socket, method, authority = sys.argv[1], sys.argv[2], sys.argv[3]
options = [("grpc.default_authority", authority)] if authority else []
channel = grpc.insecure_channel("unix://" + socket, options=options)
call = channel.unary_unary(method, request_serializer=lambda x: x, response_deserializer=lambda x: x)
sys.stdout.buffer.write(call(b"", timeout=10))
"#;
    for (socket, method) in [
        (&csi.socket, "/csi.v1.Identity/GetPluginInfo"),
        (&reg_socket, "/pluginregistration.Registration/GetInfo"),
    ] {
        // grpcio's own default for a unix: target, and the percent-encoded path newer
        // C-core versions send by default.
        for authority in [String::new(), c_core_authority(socket)] {
            let out = std::process::Command::new(python)
                .args(["-c", script])
                .arg(socket)
                .arg(method)
                .arg(&authority)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "grpcio, {method}, :authority {authority:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(out.stdout.windows(NAME.len()).any(|w| w == NAME.as_bytes()));
        }
    }
}

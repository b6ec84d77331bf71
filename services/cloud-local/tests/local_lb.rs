#![allow(clippy::unwrap_used)] // In a test, an unwrap is an assertion.

//! The local load balancer carries real traffic: TCP and UDP echo servers stand in for
//! two nodes' NodePorts, and connections to the ingress address reach them — only the
//! backends the balancer currently has.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use overcast_cloud::{Backend, LbPort, LoadBalancerSpec, LoadBalancers, Protocol, ServiceRef};
use overcast_cloud_local::lb::{LocalLoadBalancers, Pool};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A TCP and a UDP echo server on `ip:port` that prefix replies with `name`.
async fn echo_node(name: &'static str, ip: &str, tcp_port: u16, udp_port: u16) {
    let tcp = TcpListener::bind((ip, tcp_port)).await.unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = tcp.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let n = s.read(&mut buf).await.unwrap();
                let reply = format!("{name}:{}", String::from_utf8_lossy(&buf[..n]));
                s.write_all(reply.as_bytes()).await.unwrap();
            });
        }
    });
    let udp = UdpSocket::bind((ip, udp_port)).await.unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 64];
        loop {
            let (n, from) = udp.recv_from(&mut buf).await.unwrap();
            let reply = format!("{name}:{}", String::from_utf8_lossy(&buf[..n]));
            udp.send_to(reply.as_bytes(), from).await.unwrap();
        }
    });
}

async fn tcp_ask(addr: SocketAddr, msg: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(msg.as_bytes()).await?;
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(3), s.read(&mut buf)).await??;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

async fn udp_ask(addr: SocketAddr, msg: &str) -> String {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    s.send_to(msg.as_bytes(), addr).await.unwrap();
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(3), s.recv(&mut buf))
        .await
        .expect("a UDP reply")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_reach_the_current_backends_node_ports() {
    let (tcp_np, udp_np) = (free_port(), free_port());
    echo_node("node-a", "127.0.0.1", tcp_np, udp_np).await;
    echo_node("node-b", "127.0.0.2", tcp_np, udp_np).await;
    let lbs = LocalLoadBalancers::new("127.241.0.0/24".parse::<Pool>().unwrap());
    let (tcp_port, udp_port) = (free_port(), free_port());
    let backend = |n: &str, a: &str| Backend {
        node: n.into(),
        address: a.into(),
        labels: Default::default(),
    };
    let mut spec = LoadBalancerSpec {
        name: "a0000000-svc".into(),
        service: ServiceRef {
            namespace: "default".into(),
            name: "echo".into(),
            uid: "a0000000-0000-0000-0000-000000000000".into(),
        },
        ports: vec![
            LbPort {
                name: "tcp".into(),
                protocol: Protocol::Tcp,
                port: tcp_port,
                node_port: tcp_np,
            },
            LbPort {
                name: "udp".into(),
                protocol: Protocol::Udp,
                port: udp_port,
                node_port: udp_np,
            },
        ],
        backends: vec![
            backend("node-a", "127.0.0.1"),
            backend("node-b", "127.0.0.2"),
        ],
        ..LoadBalancerSpec::default()
    };
    let status = lbs.ensure_load_balancer(&spec).await.unwrap();
    assert_eq!(status.ingress_ips, vec!["127.241.0.1".to_owned()]);
    assert_eq!(
        lbs.ensure_load_balancer(&spec).await.unwrap(),
        status,
        "ensure is idempotent"
    );
    let ip: std::net::IpAddr = status.ingress_ips[0].parse().unwrap();
    let (tcp, udp) = (SocketAddr::new(ip, tcp_port), SocketAddr::new(ip, udp_port));

    let mut seen = HashSet::new();
    for i in 0..6 {
        let reply = tcp_ask(tcp, &format!("m{i}")).await.unwrap();
        assert!(reply.ends_with(&format!(":m{i}")), "{reply}");
        seen.insert(reply.split(':').next().unwrap().to_owned());
    }
    assert_eq!(seen.len(), 2, "round-robin over both nodes: {seen:?}");
    assert!(udp_ask(udp, "ping").await.ends_with(":ping"));

    // node-a leaves: everything goes to node-b.
    spec.backends = vec![backend("node-b", "127.0.0.2")];
    lbs.ensure_load_balancer(&spec).await.unwrap();
    for i in 0..4 {
        assert_eq!(
            tcp_ask(tcp, &format!("x{i}")).await.unwrap(),
            format!("node-b:x{i}")
        );
    }
    assert_eq!(udp_ask(udp, "pong").await, "node-b:pong");

    // A second balancer gets the next address; deleting the first stops its traffic.
    let other = LoadBalancerSpec {
        name: "b0000000-svc".into(),
        ..spec.clone()
    };
    let ports_taken = lbs.ensure_load_balancer(&other).await.unwrap();
    assert_eq!(ports_taken.ingress_ips, vec!["127.241.0.2".to_owned()]);
    lbs.delete_load_balancer(&spec.reference()).await.unwrap();
    lbs.delete_load_balancer(&spec.reference())
        .await
        .expect("deleting twice is fine");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        tcp_ask(tcp, "gone").await.is_err(),
        "a deleted balancer no longer listens"
    );
    assert!(lbs
        .get_load_balancer(&spec.reference())
        .await
        .unwrap()
        .is_none());
    let requested = LoadBalancerSpec {
        name: "c".into(),
        requested_ip: Some("127.241.0.2".into()),
        ..spec.clone()
    };
    assert!(
        lbs.ensure_load_balancer(&requested).await.is_err(),
        "a taken address is refused"
    );
}

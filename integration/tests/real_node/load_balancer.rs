//! A `type: LoadBalancer` Service through the deployed ccm on the local cloud: the ccm
//! (hostNetwork, as the local overlay runs it) gives the Service an address from the
//! pool, listens there, and forwards each connection to the Service's NodePort on the
//! node's InternalIP — what every cloud's balancer does. From the NodePort on, a cluster's
//! kube-proxy carries it to a pod; the kit has no kube-proxy, so for the one NodePort of
//! this Service the test plays that part (a forwarder to the pod's IP, counting what it
//! carried). A request to the Service's address then reaches the pod, and only through
//! the ccm's balancer and the NodePort.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use overcast_integration::real_node::Node;

use super::NS;

const TOKEN: &str = "served-by-the-pod-behind-the-balancer";

pub fn a_load_balancer_service_reaches_its_pod(node: &Node) {
    let web = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: web, namespace: {NS}, labels: {{app: web}}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: busybox:1.35.0
    imagePullPolicy: Never
    command: [sh, -c, "mkdir -p /www && echo {TOKEN} > /www/index.html && exec httpd -f -p 8080 -h /www"]
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {NS}}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports:
  - {{name: http, port: 80, targetPort: 8080, protocol: TCP}}
"#
    );
    node.apply("web", &[web]);
    let ingress = node.wait_for(
        "the Service's balancer address",
        Duration::from_secs(60),
        &[
            "-n",
            NS,
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.status.loadBalancer.ingress[0].ip}",
        ],
        |out| !out.trim().is_empty(),
    );
    let ingress = ingress.trim().to_owned();
    assert!(
        ingress.starts_with("127.240."),
        "an address from the local overlay's pool: {ingress}"
    );
    let pod_ip = node.wait_for(
        "the web pod's IP",
        Duration::from_secs(120),
        &[
            "-n",
            NS,
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.status.podIP}",
        ],
        |out| !out.trim().is_empty(),
    );
    let node_port = node.kubectl(&[
        "-n",
        NS,
        "get",
        "service",
        "web",
        "-o",
        "jsonpath={.spec.ports[0].nodePort}",
    ]);
    let node_ip = node.kubectl(&[
        "get",
        "node",
        "vm",
        "-o",
        "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
    ]);
    let node_port: SocketAddr = format!("{}:{}", node_ip.trim(), node_port.trim())
        .parse()
        .expect("the node's InternalIP and the Service's NodePort");
    let pod: SocketAddr = format!("{}:8080", pod_ip.trim()).parse().unwrap();
    let kube_proxy = NodePort::forward(node_port, pod);

    let started = Instant::now();
    let body = loop {
        match http_get(&format!("{ingress}:80")) {
            Ok(body) if body.contains(TOKEN) => break body,
            other if started.elapsed() > Duration::from_secs(60) => {
                panic!("GET http://{ingress}/ did not reach the pod: {other:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(250)),
        }
    };
    assert!(body.contains(TOKEN));
    assert!(
        kube_proxy.carried() >= 1,
        "the request went through the NodePort"
    );

    // The Service deleted: the ccm tears its balancer down (the finalizer is ours) and
    // nothing listens on the address any more.
    node.kubectl(&[
        "-n",
        NS,
        "delete",
        "service",
        "web",
        "--wait=true",
        "--timeout=60s",
    ]);
    let started = Instant::now();
    while TcpStream::connect_timeout(
        &format!("{ingress}:80").parse().unwrap(),
        Duration::from_secs(1),
    )
    .is_ok()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{ingress}:80 still listens after the Service is gone"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    node.kubectl(&["-n", NS, "delete", "pod", "web", "--wait=false"]);
}

/// `GET /` over HTTP/1.0; the whole answer.
fn http_get(addr: &str) -> std::io::Result<String> {
    let addr: SocketAddr = addr.parse().unwrap();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: overcast-it\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer)
}

/// What kube-proxy would do for one NodePort, in user space: connections to the node's
/// address and port carried to one endpoint. Stopped (and unbound) when dropped.
struct NodePort {
    stop: Arc<AtomicBool>,
    carried: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl NodePort {
    fn forward(listen: SocketAddr, to: SocketAddr) -> NodePort {
        let listener = TcpListener::bind(listen)
            .unwrap_or_else(|e| panic!("stand in for kube-proxy on {listen}: {e}"));
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let carried = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, carried) = (Arc::clone(&stop), Arc::clone(&carried));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            carried.fetch_add(1, Ordering::Relaxed);
                            std::thread::spawn(move || splice(client, to));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        NodePort {
            stop,
            carried,
            thread: Some(thread),
        }
    }

    fn carried(&self) -> usize {
        self.carried.load(Ordering::Relaxed)
    }
}

impl Drop for NodePort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Copies both ways between `client` and a new connection to `to`.
fn splice(client: TcpStream, to: SocketAddr) {
    let Ok(upstream) = TcpStream::connect_timeout(&to, Duration::from_secs(3)) else {
        return;
    };
    let _ = client.set_nonblocking(false);
    let (mut c_read, mut u_write) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let back = std::thread::spawn(move || {
        let (mut u_read, mut c_write) = (upstream, client);
        let _ = std::io::copy(&mut u_read, &mut c_write);
        let _ = c_write.shutdown(Shutdown::Write);
    });
    let _ = std::io::copy(&mut c_read, &mut u_write);
    let _ = u_write.shutdown(Shutdown::Write);
    let _ = back.join();
}

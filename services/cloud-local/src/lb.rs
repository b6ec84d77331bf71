//! The local cloud's load balancers are real: each Service gets an address from a pool
//! (a loopback range by default) on which this process listens on every Service port,
//! TCP and UDP, and forwards to the NodePort of a backend node, round-robin.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use overcast_cloud::load_balancers::{
    Backend, LbPort, LoadBalancerRef, LoadBalancerSpec, LoadBalancerStatus, LoadBalancers, Protocol,
};
use overcast_cloud::{CloudError, Result};

/// Where ingress addresses come from unless configured: loopback, so nothing leaves the host.
pub const DEFAULT_POOL: &str = "127.240.0.0/16";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const UDP_IDLE: Duration = Duration::from_secs(60);

/// An IPv4 range such as `127.240.0.0/16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    base: u32,
    size: u32,
}

impl std::str::FromStr for Pool {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let (ip, bits) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let bits: u32 = bits.parse().map_err(|e| format!("{s:?}: {e}"))?;
        if !(8..=30).contains(&bits) {
            return Err(format!("{s:?}: the prefix must be /8 to /30"));
        }
        let mask = u32::MAX << (32 - bits);
        Ok(Self {
            base: u32::from(ip) & mask,
            size: 1 << (32 - bits),
        })
    }
}

impl Pool {
    fn contains(&self, ip: Ipv4Addr) -> bool {
        let n = u32::from(ip);
        n > self.base && n < self.base + self.size - 1
    }

    /// The first address not in `used` (network and broadcast addresses skipped).
    fn allocate(&self, used: &[Ipv4Addr]) -> Option<Ipv4Addr> {
        (1..self.size - 1)
            .map(|i| Ipv4Addr::from(self.base + i))
            .find(|ip| !used.contains(ip))
    }
}

pub struct LocalLoadBalancers {
    pool: Pool,
    balancers: Mutex<HashMap<String, Balancer>>,
}

struct Balancer {
    ip: Ipv4Addr,
    ports: Vec<LbPort>,
    backends: Arc<RwLock<Vec<Backend>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl LocalLoadBalancers {
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            balancers: Mutex::new(HashMap::new()),
        }
    }

    fn status(ip: Ipv4Addr) -> LoadBalancerStatus {
        LoadBalancerStatus {
            ingress_ips: vec![ip.to_string()],
            ..LoadBalancerStatus::default()
        }
    }
}

#[async_trait]
impl LoadBalancers for LocalLoadBalancers {
    async fn get_load_balancer(&self, lb: &LoadBalancerRef) -> Result<Option<LoadBalancerStatus>> {
        Ok(self
            .balancers
            .lock()
            .await
            .get(&lb.name)
            .map(|b| Self::status(b.ip)))
    }

    async fn ensure_load_balancer(&self, spec: &LoadBalancerSpec) -> Result<LoadBalancerStatus> {
        if let Some(p) = spec.ports.iter().find(|p| p.protocol == Protocol::Sctp) {
            return Err(CloudError::InvalidArgument(format!(
                "port {}: the local cloud's balancers carry TCP and UDP, not SCTP",
                p.port
            )));
        }
        let mut balancers = self.balancers.lock().await;
        if let Some(b) = balancers.get_mut(&spec.name) {
            *b.backends.write().unwrap_or_else(|p| p.into_inner()) = spec.backends.clone();
            if b.ports == spec.ports {
                return Ok(Self::status(b.ip));
            }
            // Ports changed: listen anew on the same address.
            for t in b.tasks.drain(..) {
                t.abort();
            }
            let ip = b.ip;
            let backends = Arc::clone(&b.backends);
            b.tasks = listen(ip, &spec.ports, &backends).await?;
            b.ports = spec.ports.clone();
            return Ok(Self::status(ip));
        }
        let used: Vec<Ipv4Addr> = balancers.values().map(|b| b.ip).collect();
        let ip = match &spec.requested_ip {
            Some(raw) => {
                let ip: Ipv4Addr = raw.parse().map_err(|_| {
                    CloudError::InvalidArgument(format!(
                        "load balancer IP {raw:?} is not an IPv4 address"
                    ))
                })?;
                if !self.pool.contains(ip) || used.contains(&ip) {
                    return Err(CloudError::InvalidArgument(format!(
                        "load balancer IP {ip} is not free in the pool"
                    )));
                }
                ip
            }
            None => self.pool.allocate(&used).ok_or_else(|| {
                CloudError::ResourceExhausted("the address pool is exhausted".into())
            })?,
        };
        let backends = Arc::new(RwLock::new(spec.backends.clone()));
        let tasks = listen(ip, &spec.ports, &backends).await?;
        balancers.insert(
            spec.name.clone(),
            Balancer {
                ip,
                ports: spec.ports.clone(),
                backends,
                tasks,
            },
        );
        tracing::info!(balancer = %spec.name, service = %spec.service, %ip, "load balancer listening");
        Ok(Self::status(ip))
    }

    async fn delete_load_balancer(&self, lb: &LoadBalancerRef) -> Result<()> {
        if self.balancers.lock().await.remove(&lb.name).is_some() {
            tracing::info!(balancer = %lb.name, service = %lb.service, "load balancer removed");
        }
        Ok(())
    }
}

/// Binds every port; on any failure nothing stays bound.
async fn listen(
    ip: Ipv4Addr,
    ports: &[LbPort],
    backends: &Arc<RwLock<Vec<Backend>>>,
) -> Result<Vec<JoinHandle<()>>> {
    let mut tasks = Vec::new();
    let next = Arc::new(AtomicUsize::new(0));
    for p in ports {
        let addr = SocketAddr::new(IpAddr::V4(ip), p.port);
        let bound = match p.protocol {
            Protocol::Tcp => TcpListener::bind(addr).await.map(|l| {
                tokio::spawn(tcp_loop(
                    l,
                    p.node_port,
                    Arc::clone(backends),
                    Arc::clone(&next),
                ))
            }),
            Protocol::Udp => UdpSocket::bind(addr).await.map(|s| {
                tokio::spawn(udp_loop(
                    Arc::new(s),
                    p.node_port,
                    Arc::clone(backends),
                    Arc::clone(&next),
                ))
            }),
            // Refused in ensure_load_balancer, before anything is bound.
            Protocol::Sctp => Err(std::io::Error::from(std::io::ErrorKind::Unsupported)),
        };
        match bound {
            Ok(task) => tasks.push(task),
            Err(e) => {
                for t in &tasks {
                    t.abort();
                }
                return Err(CloudError::io(
                    format!("listen on {addr} ({:?})", p.protocol),
                    e,
                ));
            }
        }
    }
    Ok(tasks)
}

/// The backends in round-robin order for the next connection.
fn rotation(
    backends: &RwLock<Vec<Backend>>,
    next: &AtomicUsize,
    node_port: u16,
) -> Vec<SocketAddr> {
    let list = backends.read().unwrap_or_else(|p| p.into_inner()).clone();
    if list.is_empty() {
        return vec![];
    }
    let start = next.fetch_add(1, Ordering::Relaxed) % list.len();
    (0..list.len())
        .filter_map(|i| {
            list[(start + i) % list.len()]
                .address
                .parse::<IpAddr>()
                .ok()
        })
        .map(|ip| SocketAddr::new(ip, node_port))
        .collect()
}

async fn tcp_loop(
    listener: TcpListener,
    node_port: u16,
    backends: Arc<RwLock<Vec<Backend>>>,
    next: Arc<AtomicUsize>,
) {
    loop {
        let Ok((mut client, _)) = listener.accept().await else {
            continue;
        };
        let targets = rotation(&backends, &next, node_port);
        tokio::spawn(async move {
            for target in targets {
                if let Ok(Ok(mut upstream)) =
                    tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await
                {
                    let _ = copy_bidirectional(&mut client, &mut upstream).await;
                    return;
                }
            }
        });
    }
}

type Sessions = Arc<Mutex<HashMap<SocketAddr, Arc<UdpSocket>>>>;

async fn udp_loop(
    socket: Arc<UdpSocket>,
    node_port: u16,
    backends: Arc<RwLock<Vec<Backend>>>,
    next: Arc<AtomicUsize>,
) {
    let sessions: Sessions = Arc::default();
    let mut buf = vec![0u8; 65536];
    loop {
        let Ok((n, client)) = socket.recv_from(&mut buf).await else {
            continue;
        };
        let existing = sessions.lock().await.get(&client).cloned();
        let upstream = match existing {
            Some(u) => u,
            None => {
                let Some(target) = rotation(&backends, &next, node_port).into_iter().next() else {
                    continue;
                };
                let local: SocketAddr = if target.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                }
                .parse()
                .unwrap_or_else(|_| unreachable!());
                let Ok(u) = UdpSocket::bind(local).await else {
                    continue;
                };
                if u.connect(target).await.is_err() {
                    continue;
                }
                let u = Arc::new(u);
                sessions.lock().await.insert(client, Arc::clone(&u));
                tokio::spawn(udp_replies(
                    Arc::clone(&socket),
                    Arc::clone(&u),
                    client,
                    Arc::clone(&sessions),
                ));
                u
            }
        };
        let _ = upstream.send(&buf[..n]).await;
    }
}

/// Carries a backend's replies to the client until the session idles out.
async fn udp_replies(
    socket: Arc<UdpSocket>,
    upstream: Arc<UdpSocket>,
    client: SocketAddr,
    sessions: Sessions,
) {
    let mut buf = vec![0u8; 65536];
    while let Ok(Ok(n)) = tokio::time::timeout(UDP_IDLE, upstream.recv(&mut buf)).await {
        let _ = socket.send_to(&buf[..n], client).await;
    }
    sessions.lock().await.remove(&client);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_allocate_inside_and_skip_used_addresses() {
        let pool: Pool = "127.240.0.0/30".parse().unwrap();
        assert_eq!(pool.allocate(&[]), Some(Ipv4Addr::new(127, 240, 0, 1)));
        assert_eq!(
            pool.allocate(&[Ipv4Addr::new(127, 240, 0, 1)]),
            Some(Ipv4Addr::new(127, 240, 0, 2))
        );
        assert_eq!(
            pool.allocate(&[Ipv4Addr::new(127, 240, 0, 1), Ipv4Addr::new(127, 240, 0, 2)]),
            None
        );
        assert!(pool.contains(Ipv4Addr::new(127, 240, 0, 2)));
        assert!(!pool.contains(Ipv4Addr::new(127, 240, 0, 3)), "broadcast");
        assert!("10.0.0.0".parse::<Pool>().is_err());
        assert!("10.0.0.0/31".parse::<Pool>().is_err());
    }
}

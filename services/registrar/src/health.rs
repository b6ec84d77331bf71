//! `/healthz`, as livenessprobe answers it: healthy only when the driver answers Probe
//! ready within the timeout and the registration socket exists.

use std::path::PathBuf;
use std::sync::Arc;

use overcast_api::csi_v1 as csi;
use overcast_runtime::http::HealthCheck;
use tonic::transport::Channel;

pub fn check(channel: Channel, reg_socket: PathBuf) -> HealthCheck {
    Arc::new(move || {
        let channel = channel.clone();
        let reg_socket = reg_socket.clone();
        Box::pin(async move {
            if !reg_socket.exists() {
                return Err(format!(
                    "registration socket {} is missing",
                    reg_socket.display()
                ));
            }
            let mut identity = csi::identity_client::IdentityClient::new(channel);
            match identity.probe(csi::ProbeRequest {}).await {
                Ok(r) if r.get_ref().ready != Some(false) => Ok(()),
                Ok(_) => Err("the driver is not ready".to_owned()),
                Err(e) => Err(format!(
                    "the driver does not answer Probe: {:?}: {}",
                    e.code(),
                    e.message()
                )),
            }
        })
    })
}

//! The registrar, with the test playing kubelet: it watches the plugin directory, dials
//! the registration socket, asks GetInfo, answers NotifyRegistrationStatus, and wipes
//! the directory the way kubelet does on restart.

use std::path::Path;
use std::time::Duration;

use overcast_api::pluginregistration as reg;
use overcast_integration::csi_v1 as csi;
use overcast_integration::*;

const NAME: &str = "it.csi.overcast.dev";

async fn kubelet_client(
    socket: &Path,
) -> reg::registration_client::RegistrationClient<tonic::transport::Channel> {
    reg::registration_client::RegistrationClient::new(
        connect(socket).await.expect("dial the registration socket"),
    )
}

#[tokio::test]
async fn kubelet_gets_the_drivers_info_and_a_rejection_makes_the_registrar_exit() {
    let csi = Csi::start(&[&format!("--driver-name={NAME}")]).await;
    let mut registrar = Registrar::start(&csi.socket, csi.dir.path());
    let socket = registrar.registry.join(format!("{NAME}-reg.sock"));
    assert!(
        eventually(Duration::from_secs(10), || socket.exists()).await,
        "log:\n{}",
        registrar.log_text()
    );

    let mut kubelet = kubelet_client(&socket).await;
    let info = kubelet
        .get_info(reg::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    let driver = csi
        .identity()
        .await
        .get_plugin_info(csi::GetPluginInfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, driver.name);
    assert_eq!(info.endpoint, KUBELET_PATH);
    assert_eq!(info.supported_versions, vec!["1.0.0".to_owned()]);

    kubelet
        .notify_registration_status(reg::RegistrationStatus {
            plugin_registered: true,
            error: String::new(),
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        registrar.exited().is_none(),
        "an accepted registration keeps the registrar serving"
    );
    kubelet
        .get_info(reg::InfoRequest {})
        .await
        .expect("still serving");

    let rejection = reg::RegistrationStatus {
        plugin_registered: false,
        error: "no supported version: 9.9".into(),
    };
    kubelet
        .notify_registration_status(rejection)
        .await
        .expect("the rejection is acknowledged");
    assert!(eventually(Duration::from_secs(5), || registrar.exited().is_some()).await);
    let status = registrar.exited().unwrap();
    assert!(
        !status.success(),
        "a rejected registration exits non-zero: {status}"
    );
    assert!(
        registrar.log_text().contains("no supported version: 9.9"),
        "kubelet's reason is logged"
    );
    assert!(
        !socket.exists(),
        "the registration socket is removed on exit"
    );
}

#[tokio::test]
async fn the_registration_socket_comes_back_when_kubelet_wipes_its_directory() {
    let csi = Csi::start(&[&format!("--driver-name={NAME}")]).await;
    let mut registrar = Registrar::start(&csi.socket, csi.dir.path());
    let socket = registrar.registry.join(format!("{NAME}-reg.sock"));
    assert!(eventually(Duration::from_secs(10), || socket.exists()).await);

    std::fs::remove_file(&socket).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || socket.exists()).await,
        "the socket came back"
    );
    kubelet_client(&socket)
        .await
        .get_info(reg::InfoRequest {})
        .await
        .expect("and serves");

    std::fs::remove_dir_all(&registrar.registry).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || socket.exists()).await,
        "also when the whole directory goes"
    );
    let info = kubelet_client(&socket)
        .await
        .get_info(reg::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, NAME);
    assert!(registrar.exited().is_none());

    let status = registrar.terminate();
    assert!(status.success(), "SIGTERM exits cleanly: {status}");
    assert!(!socket.exists(), "SIGTERM removes the registration socket");
}

#[tokio::test]
async fn the_registrar_waits_for_the_driver_and_healthz_follows_it() {
    let mut csi = Csi::start(&[&format!("--driver-name={NAME}")]).await;
    csi.kill9();
    let registrar = Registrar::start(&csi.socket, csi.dir.path());
    let socket = registrar.registry.join(format!("{NAME}-reg.sock"));
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !socket.exists(),
        "no registration before the driver has told its name"
    );
    csi.restart().await;
    assert!(
        eventually(Duration::from_secs(10), || socket.exists()).await,
        "log:\n{}",
        registrar.log_text()
    );

    let port = registrar.health_port;
    assert!(
        eventually(Duration::from_secs(5), || http_get(port, "/healthz").0
            == 200)
        .await
    );
    csi.kill9();
    let (code, body) = http_get(port, "/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("Probe"), "the reason is given: {body}");
    csi.restart().await;
    assert!(
        eventually(Duration::from_secs(5), || http_get(port, "/healthz").0
            == 200)
        .await,
        "healthy again"
    );
}

#[tokio::test]
async fn a_missing_registration_socket_is_unhealthy() {
    let csi = Csi::start(&[&format!("--driver-name={NAME}")]).await;
    // Checking for the socket only once a minute keeps it gone long enough to look.
    let registrar = Registrar::start_with(
        &csi.socket,
        csi.dir.path(),
        &["--socket-check-interval-ms=60000"],
    );
    let socket = registrar.registry.join(format!("{NAME}-reg.sock"));
    assert!(eventually(Duration::from_secs(10), || socket.exists()).await);
    let port = registrar.health_port;
    assert!(
        eventually(Duration::from_secs(5), || http_get(port, "/healthz").0
            == 200)
        .await
    );
    std::fs::remove_file(&socket).unwrap();
    let (code, body) = http_get(port, "/healthz");
    assert_eq!(code, 503);
    assert!(body.contains("registration socket"), "{body}");
}

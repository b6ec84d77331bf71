use super::*;

#[test]
fn only_uuids_reach_a_url() {
    assert!(is_uuid("0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f"));
    assert!(is_uuid("0c1e2d3f4a5b6c7d8e9f0a1b2c3d4e5f"));
    for bad in [
        "",
        "../volumes",
        "0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5",
        "0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5g",
        "0c1e2d3f4a5b-6c7d-8e9f-0a1b2c3d4e5f-",
        "0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f?x=1",
    ] {
        assert!(!is_uuid(bad), "{bad}");
    }
}

#[test]
fn names_are_encoded_in_queries() {
    assert_eq!(encode("pvc-1"), "pvc-1");
    assert_eq!(encode("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
}

#[test]
fn the_serial_is_the_first_20_characters_of_the_id() {
    let c = context("0c1e2d3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f");
    assert_eq!(
        c.get("serial").map(String::as_str),
        Some("0c1e2d3f-4a5b-6c7d-8")
    );
}

#[test]
fn nova_s_refusals_between_states_are_read_from_its_answer() {
    let answer = |body: &str| overcast_cloud_http::Response {
        status: http::StatusCode::BAD_REQUEST,
        headers: Default::default(),
        body: body.as_bytes().to_vec().into(),
    };
    // What real Nova answered in CI, a detach right after an attach.
    let refused = answer(
        r#"{"badRequest": {"code": 400, "message": "Invalid volume: Invalid input received: Invalid volume: Unable to detach volume. Volume status must be 'in-use' and attach_status must be 'attached' to detach. (HTTP 400)"}}"#,
    );
    assert!(attach::bad_request(&refused).contains("Unable to detach volume"));
    assert_eq!(attach::bad_request(&answer("<html>proxy</html>")), "");
}

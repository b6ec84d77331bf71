//! Smaller controller guards (issue 12 §6): ListVolumes answers ABORTED to a token it
//! did not issue instead of an early "last page", and an expansion below the volume's
//! size asks nothing of the node.

use overcast_integration::csi_v1 as csi;
use overcast_integration::*;
use tonic::Code;

fn page(token: &str, max: i32) -> csi::ListVolumesRequest {
    csi::ListVolumesRequest {
        max_entries: max,
        starting_token: token.into(),
    }
}

#[tokio::test]
async fn list_tokens_this_driver_did_not_issue_are_aborted() {
    let mut csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    for i in 0..3 {
        c.create_volume(create_request(&format!("page-{i}"), MIB))
            .await
            .unwrap();
    }
    let first = c.list_volumes(page("", 1)).await.unwrap().into_inner();
    assert_eq!(first.entries.len(), 1);
    let token = first.next_token;
    assert!(!token.is_empty());
    let second = c.list_volumes(page(&token, 0)).await.unwrap().into_inner();
    assert_eq!(
        second.entries.len(),
        2,
        "an issued token continues the listing"
    );

    // The right shape, not issued: before, "after:vol-zzz" got an empty last page.
    let id = &first.entries[0].volume.as_ref().unwrap().volume_id;
    let (tag, _) = token["after:".len()..].split_once(':').unwrap();
    for forged in [
        "after:vol-zzz".to_owned(),
        format!("after:{id}"),
        format!("after:0000000000000000:{id}"),
        format!("after:{tag}:vol-zzz"),
        format!("after:{tag}:"),
        format!("{token}x"),
    ] {
        let err = c.list_volumes(page(&forged, 0)).await.unwrap_err();
        assert_eq!(err.code(), Code::Aborted, "{forged}: {err:?}");
    }

    // A token from before a restart: the caller must start over, not get a short list.
    csi.restart().await;
    let mut c = csi.controller().await;
    assert_eq!(
        c.list_volumes(page(&token, 0)).await.unwrap_err().code(),
        Code::Aborted
    );
}

#[tokio::test]
async fn an_expansion_below_the_current_size_is_a_no_op_everywhere() {
    let csi = Csi::start(&[]).await;
    let mut c = csi.controller().await;
    let id = c
        .create_volume(create_request("shrink", 32 * MIB))
        .await
        .unwrap()
        .into_inner()
        .volume
        .unwrap()
        .volume_id;
    let smaller = c
        .controller_expand_volume(expand_request(&id, 16 * MIB))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(smaller.capacity_bytes, 32 * MIB);
    assert!(!smaller.node_expansion_required, "nothing grew");

    // A repeat of an expansion that happened (the resizer lost the answer) still asks
    // the node to grow the filesystem: it may not have yet.
    let grown = c
        .controller_expand_volume(expand_request(&id, 48 * MIB))
        .await
        .unwrap()
        .into_inner();
    assert!(grown.node_expansion_required);
    let again = c
        .controller_expand_volume(expand_request(&id, 48 * MIB))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.capacity_bytes, 48 * MIB);
    assert!(again.node_expansion_required);
}

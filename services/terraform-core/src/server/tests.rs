use super::*;
use crate::schema::{computed, optional, required, s};

fn block() -> Block {
    Block::new(
        "",
        vec![
            computed("id", Type::String, ""),
            required("name", Type::String, ""),
            optional("memory", Type::Number, ""),
            optional("script", Type::String, ""),
            computed("status", Type::String, ""),
        ],
    )
}

#[test]
fn a_refresh_shows_drift_of_what_was_set_and_never_the_cloud_s_defaults() {
    let state = Obj::from([
        ("id".into(), s("1")),
        ("name".into(), s("a")),
        ("memory".into(), Value::Null),
        ("script".into(), s("#!")),
        ("status".into(), s("down")),
    ]);
    let seen = Obj::from([
        ("name".into(), s("b")),
        ("memory".into(), crate::schema::n(1024)),
        ("status".into(), s("up")),
    ]);
    let out = refreshed(&block(), &state, seen, false);
    assert_eq!(out["name"], s("b"), "drift of what was set shows");
    assert_eq!(
        out["memory"],
        Value::Null,
        "the cloud's default is not the user's"
    );
    assert_eq!(
        out["script"],
        s("#!"),
        "what the cloud does not say is kept"
    );
    assert_eq!(out["status"], s("up"));
}

/// An attribute an earlier release recorded null, which this release writes as an empty
/// map for "none" (its `absent`), takes the cloud's empty map: the configuration's `{}`
/// then plans no change (1c81bb4's DVP master planned a replacement). A value the cloud
/// holds otherwise stays the user's to set, as before.
#[test]
fn a_null_the_cloud_reads_as_today_s_none_is_said_as_today() {
    let b = Block::new(
        "",
        vec![
            computed("id", Type::String, ""),
            required("name", Type::String, ""),
            optional("selector", Type::Map(Box::new(Type::String)), "")
                .absent_as(Value::Map(Default::default())),
        ],
    );
    let state = Obj::from([
        ("id".into(), s("1")),
        ("name".into(), s("a")),
        ("selector".into(), Value::Null),
    ]);
    let none = Obj::from([("selector".into(), Value::Map(Default::default()))]);
    let out = refreshed(&b, &state, none, false);
    assert_eq!(out["selector"], Value::Map(Default::default()));
    let some = Obj::from([(
        "selector".into(),
        Value::Map(Obj::from([("zone".into(), s("a"))])),
    )]);
    let out = refreshed(&b, &state, some, false);
    assert_eq!(
        out["selector"],
        Value::Null,
        "the cloud's value is not the user's"
    );
}

#[test]
fn an_import_takes_everything_the_cloud_says() {
    let state = Obj::from([("id".into(), s("1"))]);
    let seen = Obj::from([
        ("name".into(), s("b")),
        ("memory".into(), crate::schema::n(1024)),
    ]);
    let out = refreshed(&block(), &state, seen, false);
    assert_eq!(out["name"], s("b"));
    assert_eq!(out["memory"], crate::schema::n(1024));
}

/// Terraform 1.0 takes from an apply only what the plan left unknown: a description
/// nobody set stays null though the cloud says "", the unknown id is the cloud's; in a
/// block given as many times as planned, element by element.
#[test]
fn an_applied_object_keeps_every_value_its_plan_knew() {
    let nic = Block::new(
        "",
        vec![
            optional("port", Type::String, ""),
            computed("mac", Type::String, ""),
        ],
    );
    let b = block().with_nesting("nic", nic, true, crate::schema::Nesting::List);
    let planned = Obj::from([
        ("id".into(), Value::Unknown),
        ("name".into(), s("a")),
        ("script".into(), Value::Null),
        (
            "nic".into(),
            Value::List(vec![Value::Map(Obj::from([
                ("port".into(), s("p-1")),
                ("mac".into(), Value::Unknown),
            ]))]),
        ),
    ]);
    let answered = Obj::from([
        ("id".into(), s("42")),
        ("name".into(), s("a")),
        ("script".into(), s("")),
        (
            "nic".into(),
            Value::List(vec![Value::Map(Obj::from([
                ("port".into(), s("P-1")),
                ("mac".into(), s("fa:16:3e:00:00:01")),
            ]))]),
        ),
    ]);
    let out = conform(&b, &planned, answered);
    assert_eq!(out["id"], s("42"));
    assert_eq!(out["script"], Value::Null);
    let Value::List(nics) = &out["nic"] else {
        panic!("{out:?}")
    };
    let Value::Map(nic) = &nics[0] else {
        panic!("{nics:?}")
    };
    assert_eq!(nic["port"], s("p-1"));
    assert_eq!(nic["mac"], s("fa:16:3e:00:00:01"));
}

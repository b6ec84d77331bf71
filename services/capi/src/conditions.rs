//! Cluster API v1beta1 conditions, set as CAPI's `conditions.MarkTrue/MarkFalse/
//! MarkUnknown` set them: the transition time moves only when the status does, and the
//! summary `Ready` condition mirrors the provider's own.

use crate::crd::common::V1Beta1Condition;

/// `Error`, `Warning`, `Info`: how bad a False condition is.
pub const SEVERITY_ERROR: &str = "Error";
pub const SEVERITY_INFO: &str = "Info";

/// Sets `kind` in `conditions` (and `Ready` after it) to `status` with `reason`,
/// `severity` and `message`; `now` is the RFC 3339 time a transition is stamped with.
pub fn set(
    conditions: &mut Vec<V1Beta1Condition>,
    kind: &str,
    status: &str,
    reason: Option<&str>,
    severity: Option<&str>,
    message: Option<String>,
    now: &str,
) {
    for t in [kind, "Ready"] {
        let previous = conditions.iter().position(|c| c.type_ == t);
        let time = match previous {
            Some(i) if conditions[i].status == status => conditions[i].last_transition_time.clone(),
            _ => now.to_owned(),
        };
        let c = V1Beta1Condition {
            type_: t.to_owned(),
            status: status.to_owned(),
            severity: if status == "False" {
                severity.map(str::to_owned)
            } else {
                None
            },
            last_transition_time: time,
            reason: reason.map(str::to_owned),
            message: message.clone().filter(|m| !m.is_empty()),
        };
        match previous {
            Some(i) => conditions[i] = c,
            None => conditions.push(c),
        }
    }
    // Ready first, then the others by type: the order CAPI keeps.
    conditions.sort_by(|a, b| (a.type_ != "Ready", &a.type_).cmp(&(b.type_ != "Ready", &b.type_)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_moves_the_time_and_a_repeat_does_not() {
        let mut c = Vec::new();
        set(
            &mut c,
            "VirtualMachineReady",
            "False",
            Some("VMNotReady"),
            Some(SEVERITY_INFO),
            None,
            "t1",
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].type_, "Ready");
        assert_eq!(c[1].severity.as_deref(), Some("Info"));
        set(
            &mut c,
            "VirtualMachineReady",
            "False",
            Some("VMError"),
            Some(SEVERITY_ERROR),
            Some("x".into()),
            "t2",
        );
        assert_eq!(c[1].last_transition_time, "t1");
        assert_eq!(c[1].reason.as_deref(), Some("VMError"));
        set(
            &mut c,
            "VirtualMachineReady",
            "True",
            None,
            None,
            None,
            "t3",
        );
        assert_eq!(c[1].last_transition_time, "t3");
        assert_eq!(c[1].severity, None);
        assert_eq!(c[0].status, "True");
    }
}

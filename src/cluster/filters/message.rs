//! Why a node does not fit a pod, in kube-scheduler's words, and its FailedScheduling summary.

use std::collections::BTreeMap;

/// Why one node does not fit a pod: one variant per kube-scheduler filter reason; `Display` is
/// kube-scheduler's reason text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Unfit {
    /// NodeUnschedulable: the node is cordoned and the pod does not tolerate that.
    #[error("node(s) were unschedulable")]
    Unschedulable,
    /// The node's Ready condition is not True.
    #[error("node(s) were not ready")]
    NotReady,
    /// NodeName: the pod names another node in `spec.nodeName`.
    #[error("node(s) didn't match the requested node name")]
    NodeName,
    /// TaintToleration: the first NoSchedule/NoExecute taint the pod does not tolerate, as `{key: value}`.
    #[error("node(s) had untolerated taint {{{0}}}")]
    UntoleratedTaint(String),
    /// NodeAffinity: the node selector or required node affinity does not match.
    #[error("node(s) didn't match Pod's node affinity/selector")]
    NodeAffinity,
    /// NodePorts: a requested host port is in use on the node.
    #[error("node(s) didn't have free ports for the requested pod ports")]
    HostPorts,
    /// NodeResourcesFit: the node's pod count is used up.
    #[error("Too many pods")]
    TooManyPods,
    /// NodeResourcesFit: not enough of the named resource is free.
    #[error("Insufficient {0}")]
    Insufficient(String),
}

impl Unfit {
    /// The taint reason for a taint key and value (`{key: value}` in the message).
    pub fn taint(key: &str, value: &str) -> Unfit {
        Unfit::UntoleratedTaint(format!("{key}: {value}"))
    }
}

/// kube-scheduler's FailedScheduling text, e.g.
/// `0/3 nodes are available: 1 node(s) had untolerated taint {a: b}, 2 Insufficient cpu.`:
/// each reason prefixed by its node count, the `"<count> <reason>"` strings sorted as strings
/// (as kube-scheduler does, so `10 ...` sorts before `2 ...`); reasons with count 0 are left out.
pub fn unavailable_message(total_nodes: usize, reasons: &BTreeMap<String, usize>) -> String {
    let mut parts: Vec<String> = reasons
        .iter()
        .filter(|(_, count)| **count > 0)
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    parts.sort_unstable();
    let mut message = format!("0/{total_nodes} nodes are available:");
    if !parts.is_empty() {
        message.push(' ');
        message.push_str(&parts.join(", "));
        message.push('.');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_kube_scheduler_texts() {
        let cases = [
            (Unfit::Unschedulable, "node(s) were unschedulable"),
            (Unfit::NotReady, "node(s) were not ready"),
            (
                Unfit::NodeName,
                "node(s) didn't match the requested node name",
            ),
            (
                Unfit::taint("gpu", "true"),
                "node(s) had untolerated taint {gpu: true}",
            ),
            (Unfit::taint("k", ""), "node(s) had untolerated taint {k: }"),
            (
                Unfit::NodeAffinity,
                "node(s) didn't match Pod's node affinity/selector",
            ),
            (
                Unfit::HostPorts,
                "node(s) didn't have free ports for the requested pod ports",
            ),
            (Unfit::TooManyPods, "Too many pods"),
            (Unfit::Insufficient("cpu".into()), "Insufficient cpu"),
            (
                Unfit::Insufficient("rdma/hca".into()),
                "Insufficient rdma/hca",
            ),
        ];
        for (unfit, text) in cases {
            assert_eq!(unfit.to_string(), text);
        }
    }

    #[test]
    fn unavailable_message_sorts_count_prefixed_strings() {
        let reasons = BTreeMap::from([
            ("Insufficient cpu".to_string(), 2),
            ("node(s) had untolerated taint {a: b}".to_string(), 1),
        ]);
        assert_eq!(
            unavailable_message(3, &reasons),
            "0/3 nodes are available: 1 node(s) had untolerated taint {a: b}, 2 Insufficient cpu."
        );
        // String order, not numeric: "10 ..." before "2 ...".
        let reasons = BTreeMap::from([
            ("Insufficient cpu".to_string(), 2),
            ("node(s) were unschedulable".to_string(), 10),
            ("Insufficient memory".to_string(), 2),
            ("unused".to_string(), 0),
        ]);
        assert_eq!(
            unavailable_message(14, &reasons),
            "0/14 nodes are available: 10 node(s) were unschedulable, 2 Insufficient cpu, 2 Insufficient memory."
        );
    }

    #[test]
    fn unavailable_message_without_reasons() {
        assert_eq!(
            unavailable_message(0, &BTreeMap::new()),
            "0/0 nodes are available:"
        );
    }
}

//! kube-scheduler's node filters for what training pods use, as pure functions over what a pod
//! asks for ([`PodConstraints`]) and what a node offers ([`NodeTraits`]), plus [`Eligibility`],
//! which keeps their static answers per (pod class, node). No I/O, no clocks.

mod affinity;
mod check;
mod eligibility;
mod extended;
mod message;
mod node;
mod pod;
mod ports;
mod taints;

pub use affinity::{
    FIELD_NODE_NAME, Operator, Requirement, SelectorTerm, selector_matches, terms_match,
};
pub use check::check_static;
pub use eligibility::{Eligibility, PodClassId};
pub use extended::{Extended, add_into, is_extended, max_into, parse_extended};
pub use message::{Unfit, unavailable_message};
pub use node::NodeTraits;
pub use pod::PodConstraints;
pub use ports::{ANY_ADDRESS, HostPort, host_ports_of, ports_conflict};
pub use taints::{
    TAINT_NOT_READY, TAINT_UNSCHEDULABLE, Taint, TaintEffect, Toleration, TolerationEffect,
    TolerationOperator, first_untolerated, tolerated,
};

//! The scheduler role: trainscale binds the pending pods that name it in `spec.schedulerName` to
//! the nodes its plan chose, holding room for planned pods not created yet.
//!
//! - [`pods`]: the unbound pods and bound host ports, from the Pod watch.
//! - [`assign`]: pure decisions from a plan: binds, reservations, unschedulable pods.
//! - [`bind`]: the writes (`pods/binding`, Events, `PodScheduled`).

pub mod assign;
pub mod bind;
pub mod pods;

pub use assign::{
    Assignments, Bind, GangTimeout, GangWait, Memory, Reserve, Settings, Unschedulable, assign,
    assign_with,
};
pub use bind::{BindOutcome, Binder, Cut, Limits};
pub use pods::{SchedulingPods, UnboundPod};

#[cfg(test)]
mod tests;

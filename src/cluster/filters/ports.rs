//! Host ports a pod asks for and when two sets of them collide (NodePorts).

use k8s_openapi::api::core::v1 as core;

/// The host IP that means every address.
pub const ANY_ADDRESS: &str = "0.0.0.0";

/// A host port: `(protocol, hostIP, hostPort)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`; `TCP` when absent.
    pub protocol: String,
    /// The host IP; `""` or `0.0.0.0` is any address.
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Whether this port binds every address.
    pub fn any_address(&self) -> bool {
        self.ip.is_empty() || self.ip == ANY_ADDRESS
    }

    /// Whether the two collide: same protocol and port, and the same IP or either one any-address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || self.any_address() || other.any_address())
    }
}

/// The host ports of a pod, as kube-scheduler's `GetHostPorts`: those of its sidecars (init
/// containers with `restartPolicy: Always`), then of its containers; each port with
/// `hostPort > 0`, and with `host_network` a port without `hostPort` uses its `containerPort`
/// (what API defaulting sets).
pub fn host_ports_of(
    init_containers: &[core::Container],
    containers: &[core::Container],
    host_network: bool,
) -> Vec<HostPort> {
    let sidecars = init_containers
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    sidecars
        .chain(containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let mut port = p.host_port.unwrap_or(0);
            if host_network && port == 0 {
                port = p.container_port;
            }
            (port > 0).then(|| HostPort {
                protocol: p
                    .protocol
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "TCP".to_string()),
                ip: p.host_ip.clone().unwrap_or_default(),
                port,
            })
        })
        .collect()
}

/// Whether two host-port lists collide (same protocol and port; IP equal or either is any-address).
pub fn ports_conflict(a: &[HostPort], b: &[HostPort]) -> bool {
    a.iter().any(|p| b.iter().any(|q| p.conflicts(q)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hp(protocol: &str, ip: &str, port: i32) -> HostPort {
        HostPort {
            protocol: protocol.into(),
            ip: ip.into(),
            port,
        }
    }

    #[test]
    fn conflicts_need_same_protocol_and_port() {
        assert!(ports_conflict(&[hp("TCP", "", 80)], &[hp("TCP", "", 80)]));
        assert!(!ports_conflict(&[hp("TCP", "", 80)], &[hp("UDP", "", 80)]));
        assert!(!ports_conflict(&[hp("TCP", "", 80)], &[hp("TCP", "", 81)]));
        assert!(!ports_conflict(&[], &[hp("TCP", "", 81)]));
    }

    #[test]
    fn any_address_collides_with_every_ip() {
        let specific = hp("TCP", "10.0.0.1", 80);
        assert!(ports_conflict(
            &[hp("TCP", "0.0.0.0", 80)],
            std::slice::from_ref(&specific)
        ));
        assert!(ports_conflict(
            std::slice::from_ref(&specific),
            &[hp("TCP", "", 80)]
        ));
        assert!(ports_conflict(
            std::slice::from_ref(&specific),
            std::slice::from_ref(&specific)
        ));
        assert!(!ports_conflict(&[specific], &[hp("TCP", "10.0.0.2", 80)]));
        assert!(ports_conflict(
            &[hp("TCP", "", 80)],
            &[hp("TCP", "0.0.0.0", 80)]
        ));
    }

    fn container(ports: Vec<core::ContainerPort>) -> core::Container {
        core::Container {
            name: "c".into(),
            ports: Some(ports),
            ..Default::default()
        }
    }

    fn port(container_port: i32, host_port: Option<i32>) -> core::ContainerPort {
        core::ContainerPort {
            container_port,
            host_port,
            ..Default::default()
        }
    }

    #[test]
    fn only_host_ports_count_without_host_network() {
        let cs = [container(vec![port(8080, None), port(9000, Some(19000))])];
        assert_eq!(host_ports_of(&[], &cs, false), vec![hp("TCP", "", 19000)]);
    }

    #[test]
    fn sidecar_ports_count_and_plain_init_container_ports_do_not() {
        let mut sidecar = container(vec![port(1, Some(7001))]);
        sidecar.restart_policy = Some("Always".into());
        let init = [container(vec![port(1, Some(7000))]), sidecar];
        let cs = [container(vec![port(1, Some(7002))])];
        assert_eq!(
            host_ports_of(&init, &cs, false),
            vec![hp("TCP", "", 7001), hp("TCP", "", 7002)]
        );
    }

    #[test]
    fn host_network_makes_every_container_port_a_host_port() {
        let mut udp = port(53, None);
        udp.protocol = Some("UDP".into());
        udp.host_ip = Some("10.1.1.1".into());
        let cs = [
            container(vec![port(8080, None)]),
            container(vec![udp, port(9000, Some(9000))]),
        ];
        assert_eq!(
            host_ports_of(&[], &cs, true),
            vec![
                hp("TCP", "", 8080),
                hp("UDP", "10.1.1.1", 53),
                hp("TCP", "", 9000)
            ]
        );
    }
}

//! Host ports for a placement (Nomad's `NetworkIndex.AssignPorts` and `AssignTaskNetwork`):
//! static ports must be free on the node; dynamic ports are picked from the configured range,
//! avoiding ports that allocations, the node's reservations or this same placement hold.

use drover_structs::{AllocatedPortMapping, NetworkResource, Node, Port};

use crate::context::NodeUsage;
use crate::util::Rng;

/// Nomad tries this many random picks before scanning the whole range.
const RANDOM_PORT_ATTEMPTS: usize = 20;
const MAX_VALID_PORT: i64 = 65536;

/// Everything a placement's port assignment consults.
pub(crate) struct PortPicker<'a> {
    pub node: &'a Node,
    pub usage: &'a NodeUsage,
    pub min: i64,
    pub max: i64,
    /// Ports this placement already took: (host ip, port).
    pub taken: Vec<(String, i64)>,
    /// Ports held by allocations this placement preempts: free for it.
    pub released: &'a [(String, i64)],
    /// The static port (host ip, port) that was not free, when that is why assignment failed.
    pub conflict: Option<(String, i64)>,
}

impl PortPicker<'_> {
    fn free(&self, ip: &str, port: i64) -> bool {
        let held = self.usage.port_used(ip, port)
            && !self.released.iter().any(|(i, p)| *p == port && i == ip);
        !held && !self.taken.iter().any(|(i, p)| *p == port && i == ip)
    }

    fn static_port(&mut self, ip: &str, port: &Port) -> Result<i64, String> {
        if port.value < 0 || port.value >= MAX_VALID_PORT {
            return Err(format!("invalid port {} (out of range)", port.value));
        }
        if !self.free(ip, port.value) {
            self.conflict = Some((ip.to_string(), port.value));
            return Err(format!(
                "reserved port collision {}={}",
                port.label, port.value
            ));
        }
        self.taken.push((ip.to_string(), port.value));
        Ok(port.value)
    }

    fn dynamic_port(&mut self, ip: &str, avoid: &[i64], rng: &mut Rng) -> Result<i64, String> {
        let usable = |picker: &Self, p: i64| picker.free(ip, p) && !avoid.contains(&p);
        if self.max < self.min {
            return Err("dynamic port selection failed".into());
        }
        let span = (self.max - self.min + 1) as usize;
        for _ in 0..RANDOM_PORT_ATTEMPTS {
            let p = self.min + rng.below(span) as i64;
            if usable(self, p) {
                self.taken.push((ip.to_string(), p));
                return Ok(p);
            }
        }
        let free: Vec<i64> = (self.min..=self.max).filter(|p| usable(self, *p)).collect();
        if free.is_empty() {
            return Err("dynamic port selection failed".into());
        }
        let p = free[rng.below(free.len())];
        self.taken.push((ip.to_string(), p));
        Ok(p)
    }

    /// Ports for a group `network` block: the port mappings and the network as the allocation
    /// records it (dynamic values filled in, the node's address set).
    pub(crate) fn assign_group(
        &mut self,
        ask: &NetworkResource,
        rng: &mut Rng,
    ) -> Result<(Vec<AllocatedPortMapping>, NetworkResource), String> {
        let mut mappings = Vec::new();
        let mut out = ask.clone();
        let statics: Vec<i64> = ask
            .reserved_ports
            .iter()
            .flatten()
            .map(|p| p.value)
            .collect();
        for port in ask.reserved_ports.iter().flatten() {
            let ip = host_ip(self.node, &port.host_network)?;
            let value = self.static_port(&ip, port)?;
            mappings.push(AllocatedPortMapping {
                label: port.label.clone(),
                value,
                to: port.to,
                host_ip: ip,
            });
        }
        for (i, port) in ask.dynamic_ports.iter().flatten().enumerate() {
            let ip = host_ip(self.node, &port.host_network)?;
            let value = self.dynamic_port(&ip, &statics, rng)?;
            let to = if port.to == -1 { value } else { port.to };
            if let Some(p) = out.dynamic_ports.as_mut().and_then(|v| v.get_mut(i)) {
                p.value = value;
                p.to = to;
            }
            mappings.push(AllocatedPortMapping {
                label: port.label.clone(),
                value,
                to,
                host_ip: ip,
            });
        }
        out.ip = self.node.primary_ip();
        Ok((mappings, out))
    }

    /// A task's legacy `resources { network { ... } }`: the offered network with its ports.
    pub(crate) fn assign_task(
        &mut self,
        ask: &NetworkResource,
        rng: &mut Rng,
    ) -> Result<NetworkResource, String> {
        let host = self
            .node
            .node_resources
            .networks
            .iter()
            .flatten()
            .find(|n| matches!(n.mode.as_str(), "" | "host") && !n.ip.is_empty());
        let mut out = NetworkResource {
            mode: ask.mode.clone(),
            device: host.map(|n| n.device.clone()).unwrap_or_default(),
            cidr: host.map(|n| n.cidr.clone()).unwrap_or_default(),
            ip: host
                .map(|n| n.ip.clone())
                .unwrap_or_else(|| self.node.primary_ip()),
            mbits: ask.mbits,
            reserved_ports: ask.reserved_ports.clone(),
            dynamic_ports: ask.dynamic_ports.clone(),
            ..Default::default()
        };
        let ip = out.ip.clone();
        let statics: Vec<i64> = ask
            .reserved_ports
            .iter()
            .flatten()
            .map(|p| p.value)
            .collect();
        for port in ask.reserved_ports.iter().flatten() {
            self.static_port(&ip, port)?;
        }
        for p in out.dynamic_ports.iter_mut().flatten() {
            p.value = self.dynamic_port(&ip, &statics, rng)?;
        }
        Ok(out)
    }
}

/// The address ports of `host_network` bind to: the node's primary address for the default
/// network, else the address whose alias matches in the node's fingerprinted host networks.
fn host_ip(node: &Node, host_network: &str) -> Result<String, String> {
    if host_network.is_empty() || host_network == "default" {
        return Ok(node.primary_ip());
    }
    node.node_resources
        .node_networks
        .as_ref()
        .and_then(|v| v.as_array())
        .into_iter()
        .flatten()
        .flat_map(|n| {
            n.get("Addresses")
                .and_then(|a| a.as_array())
                .into_iter()
                .flatten()
        })
        .find(|a| a.get("Alias").and_then(|x| x.as_str()) == Some(host_network))
        .and_then(|a| a.get("Address").and_then(|x| x.as_str()))
        .map(str::to_string)
        .ok_or_else(|| format!("no addresses available for {host_network} network"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picker<'a>(node: &'a Node, usage: &'a NodeUsage, min: i64, max: i64) -> PortPicker<'a> {
        PortPicker {
            node,
            usage,
            min,
            max,
            taken: Vec::new(),
            released: &[],
            conflict: None,
        }
    }

    fn port(label: &str, value: i64, to: i64) -> Port {
        Port {
            label: label.into(),
            value,
            to,
            host_network: String::new(),
        }
    }

    #[test]
    fn static_ports_keep_their_value_and_dynamic_ports_land_in_range() {
        let node = Node::default();
        let usage = NodeUsage::default();
        let mut p = picker(&node, &usage, 20000, 20010);
        let ask = NetworkResource {
            reserved_ports: Some(vec![port("db", 5432, 0)]),
            dynamic_ports: Some(vec![port("http", 0, -1), port("admin", 0, 0)]),
            ..Default::default()
        };
        let (maps, net) = p.assign_group(&ask, &mut Rng::seeded("x", 1)).unwrap();
        assert_eq!(maps[0].value, 5432);
        let http = &maps[1];
        assert!((20000..=20010).contains(&http.value));
        assert_eq!(http.to, http.value, "to = -1 maps to the host port");
        assert_eq!(maps[2].to, 0);
        assert_ne!(maps[1].value, maps[2].value);
        assert_eq!(net.ip, "127.0.0.1");
        assert_eq!(
            net.dynamic_ports.as_ref().unwrap()[0].value,
            http.value,
            "the recorded network carries the picked value"
        );
    }

    #[test]
    fn reserved_node_ports_collide_with_static_asks() {
        let node = Node::default();
        let mut usage = NodeUsage::default();
        usage.set_reserved(vec![(22, 22)]);
        let mut p = picker(&node, &usage, 20000, 20010);
        let ask = NetworkResource {
            reserved_ports: Some(vec![port("ssh", 22, 0)]),
            ..Default::default()
        };
        let err = p.assign_group(&ask, &mut Rng::seeded("x", 1)).unwrap_err();
        assert_eq!(err, "reserved port collision ssh=22");
    }

    #[test]
    fn an_exhausted_range_fails_dynamic_selection() {
        let node = Node::default();
        let usage = NodeUsage::default();
        let mut p = picker(&node, &usage, 20000, 20001);
        let ask = NetworkResource {
            dynamic_ports: Some(vec![port("a", 0, 0), port("b", 0, 0), port("c", 0, 0)]),
            ..Default::default()
        };
        let err = p.assign_group(&ask, &mut Rng::seeded("x", 1)).unwrap_err();
        assert_eq!(err, "dynamic port selection failed");
    }

    #[test]
    fn named_host_networks_need_an_address() {
        let mut node = Node::default();
        node.node_resources.node_networks = Some(serde_json::json!([
            {"Mode": "host", "Addresses": [{"Alias": "public", "Address": "1.2.3.4"}]}
        ]));
        assert_eq!(host_ip(&node, "public").unwrap(), "1.2.3.4");
        assert!(host_ip(&node, "private").is_err());
    }
}

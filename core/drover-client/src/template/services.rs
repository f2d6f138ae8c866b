//! consul-template's `nomadService` and `nomadServices`, served from the servers' native
//! service catalog (Nomad's `provider = "nomad"` registrations).
//!
//! Renders are synchronous and the catalog is on the servers, so a render reads what was
//! fetched before it ([`ServiceData`]) and records any query it found unanswered; the task
//! runner then fetches those and renders again, as consul-template discovers a template's
//! dependencies by rendering it. Every re-render (each second) fetches every query again
//! first, so outputs follow registrations as allocations start and stop.
//!
//! Queries are those of consul-template: `[tag.]name[?ns=namespace][@region]`, or
//! `COUNT KEY NAME` for Nomad's `choose` (the COUNT registrations whose md5 with KEY sort
//! first, so each KEY keeps its pick while instances come and go). Only the task's own
//! namespace and region are served (Nomad ties the requests to the job's namespace).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use drover_structs::ServiceRegistration;
use gotmpl::{Template, TemplateError as GoError, Value};

use crate::client::ServerConn;
use crate::csi::server::CallFuture;

/// The servers' catalog, as an object the task runners share.
pub trait ServiceCatalog: Send + Sync + 'static {
    /// The registrations of `namespace`, of service `name` only when given.
    fn registrations(
        &self,
        namespace: String,
        name: Option<String>,
    ) -> CallFuture<'_, Vec<ServiceRegistration>>;
}

/// [`ServiceCatalog`] through a [`ServerConn`].
pub struct ServerCatalog<S>(pub Arc<S>);

impl<S: ServerConn> ServiceCatalog for ServerCatalog<S> {
    fn registrations(
        &self,
        namespace: String,
        name: Option<String>,
    ) -> CallFuture<'_, Vec<ServiceRegistration>> {
        Box::pin(async move {
            self.0
                .service_registrations(&namespace, name.as_deref())
                .await
        })
    }
}

/// No servers to ask (runners in tests).
pub struct NoCatalog;

impl ServiceCatalog for NoCatalog {
    fn registrations(
        &self,
        _: String,
        _: Option<String>,
    ) -> CallFuture<'_, Vec<ServiceRegistration>> {
        Box::pin(async { Err("no service catalog here".to_string()) })
    }
}

/// What a render asks the catalog for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Query {
    Service(String),
    All,
}

/// The catalog answers a task's renders read, and the queries they found unanswered.
pub struct ServiceData {
    namespace: String,
    region: String,
    fetched: Mutex<Fetched>,
}

#[derive(Default)]
struct Fetched {
    answers: BTreeMap<Query, Vec<ServiceRegistration>>,
    missing: BTreeSet<Query>,
}

impl ServiceData {
    pub fn new(namespace: &str, region: &str) -> Arc<ServiceData> {
        Arc::new(ServiceData {
            namespace: namespace.to_string(),
            region: region.to_string(),
            fetched: Mutex::new(Fetched::default()),
        })
    }

    fn fetched(&self) -> std::sync::MutexGuard<'_, Fetched> {
        self.fetched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fetched answer, or `None` with the query recorded as missing.
    fn answer(&self, query: Query) -> Option<Vec<ServiceRegistration>> {
        let mut f = self.fetched();
        match f.answers.get(&query) {
            Some(list) => Some(list.clone()),
            None => {
                f.missing.insert(query);
                None
            }
        }
    }

    /// Whether a render asked for something not fetched yet (its failure says nothing yet).
    pub fn has_missing(&self) -> bool {
        !self.fetched().missing.is_empty()
    }

    /// Whether any render asked the catalog anything.
    pub fn is_used(&self) -> bool {
        let f = self.fetched();
        !f.answers.is_empty() || !f.missing.is_empty()
    }

    /// Fetches the queries renders found unanswered, and with `refresh` every query asked
    /// before as well. An answer that fails leaves the last one in place.
    pub async fn fetch(&self, catalog: &dyn ServiceCatalog, refresh: bool) -> Result<(), String> {
        let queries: Vec<Query> = {
            let f = self.fetched();
            let mut q: BTreeSet<Query> = f.missing.clone();
            if refresh {
                q.extend(f.answers.keys().cloned());
            }
            q.into_iter().collect()
        };
        for query in queries {
            let name = match &query {
                Query::Service(n) => Some(n.clone()),
                Query::All => None,
            };
            // In Nomad's order (its state index: by registration ID), whatever the answer's.
            let mut list = catalog
                .registrations(self.namespace.clone(), name)
                .await
                .map_err(|e| match &query {
                    Query::Service(n) => format!("reading service {n:?} from the servers: {e}"),
                    Query::All => format!("reading the services from the servers: {e}"),
                })?;
            list.sort_by(|a, b| a.id.cmp(&b.id));
            let mut f = self.fetched();
            f.missing.remove(&query);
            f.answers.insert(query, list);
        }
        Ok(())
    }
}

fn exec_err(message: String) -> GoError {
    GoError::Exec(message)
}

/// A parsed `[tag.]name[?ns=namespace][@region]`.
#[derive(Debug, PartialEq, Eq)]
struct ServiceName {
    tag: Option<String>,
    name: String,
    namespace: Option<String>,
    region: Option<String>,
}

fn parse_query(f: &str, q: &str) -> gotmpl::Result<ServiceName> {
    // consul-template's tagRe, serviceNameRe, namespace and regionRe, anchored.
    static RE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        regex::Regex::new(
            r"\A(?:(?P<tag>[\w=:.\-]+)\.)?(?P<name>[\w\-]+)(?:\?ns=(?P<ns>[\w\-]+))?(?:@(?P<region>[\w.\-]+))?\z",
        )
        .expect("a constant pattern")
    });
    let caps = re
        .captures(q)
        .ok_or_else(|| exec_err(format!("{f}: invalid service query {q:?}")))?;
    let group = |n: &str| caps.name(n).map(|m| m.as_str().to_string());
    Ok(ServiceName {
        tag: group("tag"),
        name: group("name").unwrap_or_default(),
        namespace: group("ns"),
        region: group("region"),
    })
}

/// Nomad's `ServiceRegistration.HashWith`: md5 of the port (8 bytes, big endian), the
/// allocation ID, ID, namespace, address, service name, each tag and `key`, in hex.
fn hash_with(r: &ServiceRegistration, key: &str) -> String {
    use md5::{Digest, Md5};
    let mut sum = Md5::new();
    sum.update((r.port as u64).to_be_bytes());
    for part in [
        &r.alloc_id,
        &r.id,
        &r.namespace,
        &r.address,
        &r.service_name,
    ] {
        sum.update(part.as_bytes());
    }
    for tag in &r.tags {
        sum.update(tag.as_bytes());
    }
    sum.update(key.as_bytes());
    hex(&sum.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Nomad's `choose`: the `count` registrations whose hash with `key` sorts first, in that
/// order; all of them when there are no more than `count`.
fn choose(mut list: Vec<ServiceRegistration>, count: usize, key: &str) -> Vec<ServiceRegistration> {
    if count >= list.len() {
        return list;
    }
    let mut keyed: Vec<(String, ServiceRegistration)> =
        list.drain(..).map(|r| (hash_with(&r, key), r)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.into_iter().take(count).map(|(_, r)| r).collect()
}

fn sorted_tags(tags: &[String]) -> Value {
    let mut tags = tags.to_vec();
    tags.sort();
    tags.dedup();
    Value::from(tags.into_iter().map(Value::from).collect::<Vec<_>>())
}

/// consul-template's `NomadService`.
fn service_value(r: &ServiceRegistration) -> Value {
    let s = |v: &str| Value::from(v);
    Value::from(BTreeMap::from([
        ("ID".to_string(), s(&r.id)),
        ("Name".to_string(), s(&r.service_name)),
        ("Node".to_string(), s(&r.node_id)),
        ("Address".to_string(), s(&r.address)),
        ("Datacenter".to_string(), s(&r.datacenter)),
        ("JobID".to_string(), s(&r.job_id)),
        ("AllocID".to_string(), s(&r.alloc_id)),
        ("Port".to_string(), Value::Int(r.port)),
        ("Tags".to_string(), sorted_tags(&r.tags)),
    ]))
}

impl ServiceData {
    /// Refuses what the servers cannot answer for this task: another namespace or region.
    fn check_scope(&self, f: &str, q: &ServiceName) -> gotmpl::Result<()> {
        if let Some(ns) = &q.namespace
            && *ns != self.namespace
        {
            return Err(exec_err(format!(
                "{f}: namespace {ns:?} is not supported: templates read the services of their job's namespace ({:?})",
                self.namespace
            )));
        }
        if let Some(region) = &q.region
            && *region != self.region
        {
            return Err(exec_err(format!(
                "{f}: region {region:?} is not supported: templates read the services of their own region ({:?})",
                self.region
            )));
        }
        Ok(())
    }

    fn not_fetched(f: &str) -> GoError {
        exec_err(format!("{f}: the service catalog has not been read yet"))
    }

    fn service(&self, args: &[Value]) -> gotmpl::Result<Value> {
        const F: &str = "nomadService";
        let (query, pick) = match args {
            [Value::String(q)] => (q.to_string(), None),
            [count, Value::String(key), Value::String(q)] => {
                let count = match count {
                    Value::Int(n) if *n >= 0 => *n as usize,
                    Value::Uint(n) => *n as usize,
                    other => {
                        return Err(exec_err(format!(
                            "{F}: the count must be a non-negative integer, not {}",
                            other.type_name()
                        )));
                    }
                };
                (q.to_string(), Some((count, key.to_string())))
            }
            _ => {
                return Err(exec_err(format!(
                    "{F}: expected arguments <service> or <count> <key> <service>"
                )));
            }
        };
        let q = parse_query(F, &query)?;
        self.check_scope(F, &q)?;
        let list = self
            .answer(Query::Service(q.name.clone()))
            .ok_or_else(|| Self::not_fetched(F))?;
        let list: Vec<ServiceRegistration> = match &q.tag {
            Some(tag) => list.into_iter().filter(|r| r.tags.contains(tag)).collect(),
            None => list,
        };
        let list = match pick {
            Some((count, key)) => choose(list, count, &key),
            None => list,
        };
        Ok(Value::from(
            list.iter().map(service_value).collect::<Vec<_>>(),
        ))
    }

    fn services(&self, args: &[Value]) -> gotmpl::Result<Value> {
        const F: &str = "nomadServices";
        match args {
            [] => {}
            [Value::String(q)] => {
                // `?ns=namespace` and `@region`, with no service name.
                let q = parse_query(F, &format!("x{q}"))?;
                self.check_scope(F, &q)?;
            }
            _ => return Err(exec_err(format!("{F}: expected no argument or a query"))),
        }
        let list = self
            .answer(Query::All)
            .ok_or_else(|| Self::not_fetched(F))?;
        let mut by_name: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in &list {
            by_name
                .entry(&r.service_name)
                .or_default()
                .extend(r.tags.iter().cloned());
        }
        Ok(Value::from(
            by_name
                .into_iter()
                .map(|(name, tags)| {
                    Value::from(BTreeMap::from([
                        ("Name".to_string(), Value::from(name)),
                        (
                            "Namespace".to_string(),
                            Value::from(self.namespace.as_str()),
                        ),
                        ("Tags".to_string(), sorted_tags(&tags)),
                    ]))
                })
                .collect::<Vec<_>>(),
        ))
    }
}

/// `t` with `nomadService` and `nomadServices` reading `data`.
pub fn functions(t: Template, data: &Arc<ServiceData>) -> Template {
    let one = data.clone();
    let all = data.clone();
    t.func("nomadService", move |args| one.service(args))
        .func("nomadServices", move |args| all.services(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(id: &str, name: &str, port: i64, tags: &[&str]) -> ServiceRegistration {
        ServiceRegistration {
            id: id.into(),
            service_name: name.into(),
            namespace: "default".into(),
            node_id: "node-1".into(),
            datacenter: "dc1".into(),
            job_id: "job".into(),
            alloc_id: format!("alloc-{id}"),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            address: "10.0.0.1".into(),
            port,
            create_index: 1,
            modify_index: 1,
        }
    }

    struct Fixed(Vec<ServiceRegistration>);

    impl ServiceCatalog for Fixed {
        fn registrations(
            &self,
            namespace: String,
            name: Option<String>,
        ) -> CallFuture<'_, Vec<ServiceRegistration>> {
            let list = self
                .0
                .iter()
                .filter(|r| r.namespace == namespace)
                .filter(|r| name.as_ref().is_none_or(|n| *n == r.service_name))
                .cloned()
                .collect();
            Box::pin(async move { Ok(list) })
        }
    }

    fn render(data: &Arc<ServiceData>, text: &str) -> Result<String, GoError> {
        functions(Template::new("t"), data)
            .parse(text)?
            .execute_to_string(&Value::Nil)
    }

    /// Renders as the task runner does: fetch what a render missed, render again.
    fn render_fetching(
        data: &Arc<ServiceData>,
        catalog: &dyn ServiceCatalog,
        text: &str,
    ) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..5 {
            match render(data, text) {
                Ok(out) => return out,
                Err(_) if data.has_missing() => rt.block_on(data.fetch(catalog, false)).unwrap(),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("never rendered");
    }

    #[test]
    fn queries_parse_as_consul_template_reads_them() {
        let q = parse_query("f", "web").unwrap();
        assert_eq!((q.tag, q.name.as_str()), (None, "web"));
        let q = parse_query("f", "v1.canary.web?ns=prod@eu-west").unwrap();
        assert_eq!(q.tag.as_deref(), Some("v1.canary"));
        assert_eq!(q.name, "web");
        assert_eq!(q.namespace.as_deref(), Some("prod"));
        assert_eq!(q.region.as_deref(), Some("eu-west"));
        assert!(parse_query("f", "bad name").is_err());
        assert!(parse_query("f", "").is_err());
    }

    #[test]
    fn instances_render_with_their_address_port_and_tags_once_fetched() {
        let catalog = Fixed(vec![
            reg("b", "db", 6000, &["primary", "a"]),
            reg("a", "db", 5000, &[]),
            reg("c", "web", 80, &["v1"]),
        ]);
        let data = ServiceData::new("default", "global");
        // Before a fetch the query is recorded, and the render fails saying why.
        let e = render(&data, r#"{{ range nomadService "db" }}x{{ end }}"#).unwrap_err();
        assert!(e.to_string().contains("not been read yet"), "{e}");
        assert!(data.has_missing());
        let out = render_fetching(
            &data,
            &catalog,
            r#"{{ range nomadService "db" }}{{ .Address }}:{{ .Port }} {{ .Tags }} {{ .Name }} {{ .AllocID }}
{{ end }}"#,
        );
        assert_eq!(
            out,
            "10.0.0.1:5000 [] db alloc-a\n10.0.0.1:6000 [a primary] db alloc-b\n"
        );
        let tagged = render_fetching(
            &data,
            &catalog,
            r#"{{ range nomadService "primary.db" }}{{ .Port }}{{ end }}"#,
        );
        assert_eq!(tagged, "6000");
        let none = render_fetching(
            &data,
            &catalog,
            r#"{{ range nomadService "absent" }}x{{ else }}none{{ end }}"#,
        );
        assert_eq!(none, "none");
    }

    #[test]
    fn services_list_names_with_their_tags_merged() {
        let catalog = Fixed(vec![
            reg("a", "web", 1, &["v2"]),
            reg("b", "web", 2, &["v1", "v2"]),
            reg("c", "db", 3, &["x"]),
        ]);
        let data = ServiceData::new("default", "global");
        let out = render_fetching(
            &data,
            &catalog,
            r#"{{ range nomadServices }}{{ .Name }}={{ .Tags }};{{ end }}{{ range nomadServices }}{{ range nomadService .Name }}{{ .Port }}{{ end }}{{ end }}"#,
        );
        assert_eq!(out, "db=[x];web=[v1 v2];312");
    }

    #[test]
    fn choose_keeps_a_stable_subset_per_key() {
        let list: Vec<_> = (0..5)
            .map(|i| reg(&format!("id{i}"), "db", 1000 + i, &[]))
            .collect();
        let picked = choose(list.clone(), 2, "alloc-1");
        assert_eq!(picked.len(), 2);
        // Removing an instance that was not picked keeps the pick.
        let rest: Vec<_> = list
            .iter()
            .filter(|r| !picked.iter().any(|p| p.id == r.id))
            .cloned()
            .collect();
        let without_one: Vec<_> = list
            .iter()
            .filter(|r| r.id != rest[0].id)
            .cloned()
            .collect();
        assert_eq!(choose(without_one, 2, "alloc-1"), picked);
        assert_eq!(choose(list.clone(), 9, "k").len(), 5);
        // The hash is Nomad's input layout.
        use md5::{Digest, Md5};
        let mut sum = Md5::new();
        sum.update(1000u64.to_be_bytes());
        sum.update(b"alloc-id0id0default10.0.0.1dbk");
        assert_eq!(hash_with(&list[0], "k"), hex(&sum.finalize()));
        let catalog = Fixed(list);
        let data = ServiceData::new("default", "global");
        let out = render_fetching(
            &data,
            &catalog,
            r#"{{ range nomadService 1 "k" "db" }}{{ .ID }}{{ end }}"#,
        );
        assert_eq!(out, choose(catalog.0.clone(), 1, "k")[0].id);
    }

    #[test]
    fn other_namespaces_and_regions_are_refused_by_name() {
        let data = ServiceData::new("default", "global");
        let e = render(&data, r#"{{ nomadService "db?ns=prod" }}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("namespace \"prod\" is not supported"),
            "{e}"
        );
        let e = render(&data, r#"{{ nomadService "db@eu" }}"#).unwrap_err();
        assert!(
            e.to_string().contains("region \"eu\" is not supported"),
            "{e}"
        );
        assert!(!data.has_missing());
        let e = render(&data, r#"{{ nomadService 1 "db" }}"#).unwrap_err();
        assert!(e.to_string().contains("expected arguments"), "{e}");
    }
}

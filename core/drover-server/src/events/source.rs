//! Which objects a log entry changes, and the event type Nomad gives that change (its
//! `MsgTypeEvents`): taken from the entry before it is applied (the FSM consumes it), turned
//! into events from the state after it applied, so each event carries the stored object.

use drover_state::StateSnapshot;

use super::{Event, EventBatch, Payload};
use crate::fsm::LogEntry;

/// What one entry touched.
#[derive(Debug, Default)]
pub(crate) struct EntryEvents {
    event_type: &'static str,
    job: Option<(String, String)>,
    evals: Vec<String>,
    allocs: Vec<String>,
    node: Option<String>,
    deployments: Vec<String>,
    /// ACL tokens (accessors) and policies (names) written, read after the entry.
    acl_tokens: Vec<String>,
    acl_policies: Vec<String>,
    /// CSI volumes (namespace, id) and plugins written, read after the entry.
    csi_volumes: Vec<(String, String)>,
    csi_plugins: Vec<String>,
    /// Objects the entry deletes, as they were before it (Nomad streams a deleted token or
    /// policy whole).
    deleted: Vec<Payload>,
    /// The allocations whose service registrations the entry may change (`None`: all of
    /// `allocs`). A plan's new placements are not running yet: they register nothing.
    service_allocs: Option<Vec<String>>,
    /// The service registrations of those allocations before the entry: those not there after
    /// it stream as `ServiceDeregistration`, new ones as `ServiceRegistration`.
    services_before: Vec<drover_structs::ServiceRegistration>,
}

/// A plan's allocations that can change registrations: the stopped ones, and placements that
/// update a running allocation in place.
fn plan_service_allocs(
    stopped: &[drover_structs::Allocation],
    placed: &[drover_structs::Allocation],
) -> Vec<String> {
    stopped
        .iter()
        .chain(
            placed
                .iter()
                .filter(|a| a.client_status == drover_structs::ALLOC_CLIENT_RUNNING),
        )
        .map(|a| a.id.clone())
        .collect()
}

fn ids<'a, T: 'a>(items: impl IntoIterator<Item = &'a T>, id: fn(&T) -> &String) -> Vec<String> {
    items.into_iter().map(|t| id(t).clone()).collect()
}

impl EntryEvents {
    /// `None` for entries Nomad streams nothing for (evaluation GC, scheduler configuration,
    /// CSI bookkeeping). `before` is the state the entry applies to (read only for deletes).
    pub(crate) fn of(entry: &LogEntry, before: impl Fn() -> StateSnapshot) -> Option<EntryEvents> {
        let eval_ids = |evals: &[drover_structs::Evaluation]| ids(evals, |e| &e.id);
        let alloc_ids = |allocs: &[drover_structs::Allocation]| ids(allocs, |a| &a.id);
        let out = match entry {
            LogEntry::JobRegister { job, evals, .. } => EntryEvents {
                // A stop is a registration with `Stop` set here; Nomad's deregister entry.
                event_type: if job.stop {
                    "JobDeregistered"
                } else {
                    "JobRegistered"
                },
                job: Some((job.namespace.clone(), job.id.clone())),
                evals: eval_ids(evals),
                // A job serving CSI plugins sets how many instances they expect.
                csi_plugins: drover_structs::csi::job_csi_plugins(job)
                    .into_keys()
                    .collect(),
                ..EntryEvents::default()
            },
            LogEntry::JobPurge { evals, .. } => EntryEvents {
                event_type: "JobDeregistered",
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::EvalUpdate { evals } => EntryEvents {
                event_type: "EvaluationUpdated",
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::PlanResults {
                stopped,
                placed,
                evals,
                deployment,
                deployment_updates,
                ..
            } => EntryEvents {
                event_type: "PlanResult",
                allocs: alloc_ids(stopped)
                    .into_iter()
                    .chain(alloc_ids(placed))
                    .collect(),
                service_allocs: Some(plan_service_allocs(stopped, placed)),
                evals: eval_ids(evals),
                deployments: deployment
                    .iter()
                    .map(|d| d.id.clone())
                    .chain(deployment_updates.iter().map(|u| u.deployment_id.clone()))
                    .collect(),
                ..EntryEvents::default()
            },
            LogEntry::PlanResultsBatch { plans } => {
                let mut out = EntryEvents {
                    event_type: "PlanResult",
                    service_allocs: Some(Vec::new()),
                    ..EntryEvents::default()
                };
                for p in plans {
                    out.allocs.extend(alloc_ids(&p.stopped));
                    out.allocs.extend(alloc_ids(&p.placed));
                    if let Some(s) = out.service_allocs.as_mut() {
                        s.extend(plan_service_allocs(&p.stopped, &p.placed));
                    }
                    out.evals.extend(eval_ids(&p.evals));
                }
                out
            }
            LogEntry::AllocClientUpdate { updates, evals } => EntryEvents {
                event_type: "AllocationUpdated",
                allocs: ids(updates, |u| &u.id),
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::AllocDesiredUpdate {
                ids: alloc_ids,
                evals,
                ..
            } => EntryEvents {
                event_type: "AllocationUpdateDesiredStatus",
                allocs: alloc_ids.clone(),
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            // A node's fingerprint carries its CSI plugins: their counts change with it.
            LogEntry::NodeRegister { node } => EntryEvents {
                event_type: "NodeRegistration",
                node: Some(node.id.clone()),
                csi_plugins: node
                    .csi_controller_plugins
                    .iter()
                    .chain(node.csi_node_plugins.iter())
                    .flat_map(|m| m.keys().cloned())
                    .collect(),
                ..EntryEvents::default()
            },
            LogEntry::NodeStatusUpdate { node_id, evals, .. } => EntryEvents {
                event_type: "NodeStreamEvent",
                node: Some(node_id.clone()),
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::NodeEligibility { node_id, .. } => EntryEvents {
                event_type: "NodeDrain",
                node: Some(node_id.clone()),
                ..EntryEvents::default()
            },
            // The node is gone once applied: only its evaluations are streamed.
            LogEntry::NodeDeregister { evals, .. } => EntryEvents {
                event_type: "NodeDeregistration",
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::NodeDrain { node_id, .. } => EntryEvents {
                event_type: "NodeDrain",
                node: Some(node_id.clone()),
                ..EntryEvents::default()
            },
            LogEntry::AllocMigrate {
                ids: alloc_ids,
                evals,
            } => EntryEvents {
                event_type: "AllocationUpdateDesiredStatus",
                allocs: alloc_ids.clone(),
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            // Nomad's types: a promotion, manual allocation health, else a status update
            // (a rollback's new job version comes with it).
            LogEntry::Deployment(w) => EntryEvents {
                event_type: if w.promote.is_some() {
                    "DeploymentPromotion"
                } else if w.alloc_health.is_some() {
                    "DeploymentAllocHealth"
                } else {
                    "DeploymentStatusUpdate"
                },
                job: w
                    .rollback
                    .as_ref()
                    .map(|job| (job.namespace.clone(), job.id.clone())),
                evals: eval_ids(&w.evals),
                allocs: w
                    .alloc_health
                    .iter()
                    .flat_map(|h| h.healthy.iter().chain(&h.unhealthy).cloned())
                    .collect(),
                deployments: w
                    .updates
                    .iter()
                    .map(|u| u.deployment_id.clone())
                    .chain(w.promote.iter().map(|p| p.deployment_id.clone()))
                    .collect(),
                ..EntryEvents::default()
            },
            LogEntry::AllocForceReschedule {
                ids: alloc_ids,
                evals,
            } => EntryEvents {
                event_type: "AllocationUpdateDesiredStatus",
                allocs: alloc_ids.clone(),
                evals: eval_ids(evals),
                ..EntryEvents::default()
            },
            LogEntry::JobStability {
                namespace, job_id, ..
            } => EntryEvents {
                event_type: "JobRegistered",
                job: Some((namespace.clone(), job_id.clone())),
                ..EntryEvents::default()
            },
            LogEntry::AclTokenUpsert { tokens } => EntryEvents {
                event_type: "ACLTokenUpserted",
                acl_tokens: ids(tokens, |t| &t.accessor_id),
                ..EntryEvents::default()
            },
            LogEntry::AclBootstrap { token } => EntryEvents {
                event_type: "ACLTokenUpserted",
                acl_tokens: vec![token.accessor_id.clone()],
                ..EntryEvents::default()
            },
            LogEntry::AclPolicyUpsert { policies } => EntryEvents {
                event_type: "ACLPolicyUpserted",
                acl_policies: ids(policies, |p| &p.name),
                ..EntryEvents::default()
            },
            LogEntry::AclTokenDelete { accessors } => {
                let state = before();
                EntryEvents {
                    event_type: "ACLTokenDeleted",
                    deleted: accessors
                        .iter()
                        .filter_map(|a| state.acl_token(a))
                        .map(Payload::AclToken)
                        .collect(),
                    ..EntryEvents::default()
                }
            }
            LogEntry::AclPolicyDelete { names } => {
                let state = before();
                EntryEvents {
                    event_type: "ACLPolicyDeleted",
                    deleted: names
                        .iter()
                        .filter_map(|n| state.acl_policy(n))
                        .map(Payload::AclPolicy)
                        .collect(),
                    ..EntryEvents::default()
                }
            }
            LogEntry::Csi(csi) => csi_events(csi, &before),
            LogEntry::EvalDelete { .. }
            | LogEntry::DeploymentDelete { .. }
            | LogEntry::ScalingEvent { .. }
            | LogEntry::GcReap { .. }
            | LogEntry::SchedulerConfigUpdate { .. }
            | LogEntry::NamespaceUpsert { .. }
            | LogEntry::NamespaceDelete { .. }
            | LogEntry::VariableWrite { .. }
            | LogEntry::Mesh(_) => return None,
        };
        let mut out = out;
        if out.service_allocs.is_none() {
            out.service_allocs = Some(out.allocs.clone());
        }
        if out.service_allocs.as_ref().is_some_and(|a| !a.is_empty()) {
            let before = before();
            out.services_before = out
                .service_allocs
                .iter()
                .flatten()
                .flat_map(|id| before.alloc_service_registrations(id))
                .collect();
        }
        Some(out)
    }

    /// The events, with the objects as `state` (just after the entry) holds them; objects
    /// the entry removed are left out, as Nomad leaves out deleted jobs and allocations.
    pub(crate) fn into_batch(self, index: u64, state: &StateSnapshot) -> EventBatch {
        let event_type = self.event_type;
        let event = |payload| Event {
            index,
            event_type,
            payload,
        };
        let mut events = Vec::with_capacity(self.allocs.len() + self.evals.len() + 2);
        if let Some((ns, id)) = &self.job
            && let Some(job) = state.job(ns, id)
        {
            events.push(event(Payload::Job(job)));
        }
        if let Some(id) = &self.node
            && let Some(node) = state.node(id)
        {
            events.push(event(Payload::Node(node)));
        }
        let mut deployments = self.deployments.clone();
        deployments.dedup();
        events.extend(
            deployments
                .iter()
                .filter_map(|id| state.deployment(id))
                .map(|d| event(Payload::Deployment(d))),
        );
        events.extend(
            self.allocs
                .iter()
                .filter_map(|id| state.alloc(id))
                .map(|a| event(Payload::Allocation(a))),
        );
        events.extend(
            self.evals
                .iter()
                .filter_map(|id| state.eval(id))
                .map(|e| event(Payload::Evaluation(e))),
        );
        events.extend(
            self.acl_tokens
                .iter()
                .filter_map(|a| state.acl_token(a))
                .map(|t| event(Payload::AclToken(t))),
        );
        events.extend(
            self.acl_policies
                .iter()
                .filter_map(|n| state.acl_policy(n))
                .map(|p| event(Payload::AclPolicy(p))),
        );
        events.extend(
            self.csi_volumes
                .iter()
                .filter_map(|(ns, id)| state.csi_volume(ns, id))
                .map(|v| event(Payload::CsiVolume(v))),
        );
        let mut plugins = self.csi_plugins.clone();
        plugins.sort_unstable();
        plugins.dedup();
        events.extend(
            plugins
                .iter()
                .filter_map(|id| state.csi_plugin(id))
                .map(|p| event(Payload::CsiPlugin(p))),
        );
        events.extend(self.deleted.into_iter().map(event));
        // Registrations follow their allocations (they are derived): Nomad's Service topic.
        let after: Vec<_> = self
            .service_allocs
            .iter()
            .flatten()
            .flat_map(|id| state.alloc_service_registrations(id))
            .collect();
        let service_event = |event_type, r: &drover_structs::ServiceRegistration| Event {
            index,
            event_type,
            payload: Payload::Service(std::sync::Arc::new(r.clone())),
        };
        for r in &self.services_before {
            if !after.iter().any(|a| a.id == r.id) {
                events.push(service_event("ServiceDeregistration", r));
            }
        }
        for r in &after {
            if !self.services_before.iter().any(|b| b.id == r.id) {
                events.push(service_event("ServiceRegistration", r));
            }
        }
        EventBatch { index, events }
    }
}

/// Nomad's CSI event types: a volume registered, deregistered (streamed as it was) or
/// claimed; a plugin deleted (streamed as it was).
fn csi_events(entry: &crate::csi::CsiEntry, before: impl Fn() -> StateSnapshot) -> EntryEvents {
    use crate::csi::CsiEntry;
    match entry {
        CsiEntry::VolumeRegister { volumes } => EntryEvents {
            event_type: "CSIVolumeRegistered",
            csi_volumes: volumes
                .iter()
                .map(|v| (v.namespace.clone(), v.id.clone()))
                .collect(),
            ..EntryEvents::default()
        },
        CsiEntry::VolumeDeregister { namespace, ids, .. } => {
            let state = before();
            EntryEvents {
                event_type: "CSIVolumeDeregistered",
                deleted: ids
                    .iter()
                    .filter_map(|id| state.csi_volume(namespace, id))
                    .map(Payload::CsiVolume)
                    .collect(),
                ..EntryEvents::default()
            }
        }
        CsiEntry::VolumeClaim {
            namespace,
            volume_id,
            ..
        } => EntryEvents {
            event_type: "CSIVolumeClaim",
            csi_volumes: vec![(namespace.clone(), volume_id.clone())],
            ..EntryEvents::default()
        },
        CsiEntry::PluginDelete { id } => EntryEvents {
            event_type: "CSIPluginDeregistered",
            deleted: before()
                .csi_plugin(id)
                .map(Payload::CsiPlugin)
                .into_iter()
                .collect(),
            ..EntryEvents::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use drover_state::StateStore;
    use drover_structs::{Evaluation, Job};

    #[test]
    fn a_job_registration_streams_the_job_and_its_evaluation_as_job_registered() {
        let state = StateStore::new();
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let eval = Evaluation {
            id: "e1".into(),
            job_id: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let entry = LogEntry::JobRegister {
            job: job.clone(),
            evals: vec![eval.clone()],
            enforce_index: None,
            submission: None,
        };
        let events = EntryEvents::of(&entry, || state.snapshot()).unwrap();
        state.upsert_job(5, job);
        state.upsert_evals(5, vec![eval]);
        let batch = events.into_batch(5, &state.snapshot());
        let got: Vec<(&str, &str, &str)> = batch
            .events
            .iter()
            .map(|e| (e.topic(), e.event_type, e.key()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("Job", "JobRegistered", "web"),
                ("Evaluation", "JobRegistered", "e1")
            ]
        );
    }

    #[test]
    fn an_allocation_that_starts_running_streams_its_service_registrations() {
        use drover_structs::{
            ALLOC_CLIENT_PENDING, ALLOC_CLIENT_RUNNING, ALLOC_DESIRED_RUN, AllocClientUpdate,
            Allocation, TaskGroup,
        };
        let state = StateStore::new();
        let job = std::sync::Arc::new(Job {
            id: "web".into(),
            namespace: "default".into(),
            task_groups: vec![TaskGroup {
                name: "g".into(),
                services: Some(serde_json::json!([{"Name": "api", "PortLabel": "8080"}])),
                ..Default::default()
            }],
            ..Default::default()
        });
        let alloc = Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            client_status: ALLOC_CLIENT_PENDING.into(),
            desired_status: ALLOC_DESIRED_RUN.into(),
            job: Some(job.clone()),
            ..Default::default()
        };
        state.upsert_job(4, (*job).clone());
        let jv = state.snapshot().job("default", "web");
        state.upsert_plan_results(5, jv, vec![], vec![alloc], vec![]);
        let update = |status: &str| AllocClientUpdate {
            id: "a1".into(),
            client_status: status.into(),
            client_description: String::new(),
            task_states: None,
            modify_time: 0,
            deployment_status: None,
            network_status: None,
        };
        let types = |index: u64, status: &str| {
            let entry = LogEntry::AllocClientUpdate {
                updates: vec![update(status)],
                evals: vec![],
            };
            let events = EntryEvents::of(&entry, || state.snapshot()).unwrap();
            state.update_allocs_from_client(index, vec![update(status)]);
            events
                .into_batch(index, &state.snapshot())
                .events
                .iter()
                .filter(|e| e.topic() == "Service")
                .map(|e| e.event_type)
                .collect::<Vec<_>>()
        };
        assert_eq!(types(6, ALLOC_CLIENT_RUNNING), vec!["ServiceRegistration"]);
        assert!(types(7, ALLOC_CLIENT_RUNNING).is_empty());
        assert_eq!(types(8, "complete"), vec!["ServiceDeregistration"]);
    }

    #[test]
    fn evaluation_gc_streams_nothing() {
        let entry = LogEntry::EvalDelete {
            ids: vec!["e1".into()],
        };
        assert!(EntryEvents::of(&entry, || StateStore::new().snapshot()).is_none());
    }

    #[test]
    fn a_deployment_status_change_streams_the_deployment_in_its_topic() {
        let state = StateStore::new();
        let job = Job {
            id: "web".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let d = drover_structs::Deployment::for_job(&job, 50, 0);
        state.upsert_deployments(3, vec![d.clone()], &[], vec![]);
        let entry = LogEntry::Deployment(crate::deployments::DeploymentWrite {
            updates: vec![drover_structs::DeploymentStatusUpdate {
                deployment_id: d.id.clone(),
                status: "paused".into(),
                status_description: "Deployment is paused".into(),
            }],
            ..Default::default()
        });
        let touched = EntryEvents::of(&entry, || state.snapshot()).expect("deployment events");
        let batch = touched.into_batch(3, &state.snapshot());
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].event_type, "DeploymentStatusUpdate");
        assert_eq!(batch.events[0].payload.topic(), "Deployment");
    }

    #[test]
    fn acl_writes_stream_tokens_without_secrets_and_deletes_stream_what_was_deleted() {
        let state = StateStore::new();
        let token = drover_structs::AclToken {
            accessor_id: "acc-1".into(),
            secret_id: "secret-1".into(),
            name: "ops".into(),
            ..Default::default()
        };
        let upsert = LogEntry::AclTokenUpsert {
            tokens: vec![token.clone()],
        };
        let touched = EntryEvents::of(&upsert, || state.snapshot()).expect("token events");
        state.upsert_acl_tokens(4, vec![token]);
        let batch = touched.into_batch(4, &state.snapshot());
        let json = serde_json::to_value(&batch.events[0]).unwrap();
        assert_eq!(
            (&json["Topic"], &json["Type"], &json["Key"]),
            (
                &"ACLToken".into(),
                &"ACLTokenUpserted".into(),
                &"acc-1".into()
            )
        );
        assert_eq!(json["Payload"]["ACLToken"]["Name"], "ops");
        assert_eq!(json["Payload"]["ACLToken"]["SecretID"], "", "{json}");

        let delete = LogEntry::AclTokenDelete {
            accessors: vec!["acc-1".into()],
        };
        let touched = EntryEvents::of(&delete, || state.snapshot()).expect("delete events");
        state.delete_acl_tokens(5, &["acc-1".to_string()]);
        let batch = touched.into_batch(5, &state.snapshot());
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].event_type, "ACLTokenDeleted");
        assert_eq!(batch.events[0].key(), "acc-1");

        let policy = drover_structs::AclPolicy {
            name: "readers".into(),
            ..Default::default()
        };
        let upsert = LogEntry::AclPolicyUpsert {
            policies: vec![policy.clone()],
        };
        let touched = EntryEvents::of(&upsert, || state.snapshot()).expect("policy events");
        state.upsert_acl_policies(6, vec![policy]);
        let batch = touched.into_batch(6, &state.snapshot());
        assert_eq!(
            (
                batch.events[0].topic(),
                batch.events[0].event_type,
                batch.events[0].key()
            ),
            ("ACLPolicy", "ACLPolicyUpserted", "readers")
        );
    }

    #[test]
    fn csi_volume_writes_stream_the_volume_and_a_deregistration_streams_it_as_it_was() {
        let state = StateStore::new();
        let volume = drover_structs::csi::CsiVolume {
            id: "vol1".into(),
            namespace: "default".into(),
            plugin_id: "hostpath".into(),
            secrets: Some([("token".to_string(), "v0lume-s3cr3t".to_string())].into()),
            ..Default::default()
        };
        let register = LogEntry::Csi(crate::csi::CsiEntry::VolumeRegister {
            volumes: vec![volume.clone()],
        });
        let touched = EntryEvents::of(&register, || state.snapshot()).expect("volume events");
        state.upsert_csi_volumes(7, vec![volume]).unwrap();
        let batch = touched.into_batch(7, &state.snapshot());
        let json = serde_json::to_value(&batch.events[0]).unwrap();
        assert_eq!(
            (
                &json["Topic"],
                &json["Type"],
                &json["Key"],
                &json["Namespace"]
            ),
            (
                &"CSIVolume".into(),
                &"CSIVolumeRegistered".into(),
                &"vol1".into(),
                &"default".into()
            )
        );
        assert_eq!(json["Payload"]["Volume"]["PluginID"], "hostpath", "{json}");
        assert!(
            !json.to_string().contains("v0lume-s3cr3t"),
            "a secret streamed: {json}"
        );

        let deregister = LogEntry::Csi(crate::csi::CsiEntry::VolumeDeregister {
            namespace: "default".into(),
            ids: vec!["vol1".into()],
            force: false,
        });
        let touched = EntryEvents::of(&deregister, || state.snapshot()).expect("events");
        state
            .delete_csi_volumes(8, "default", &["vol1".to_string()], false)
            .unwrap();
        let batch = touched.into_batch(8, &state.snapshot());
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.events[0].event_type, "CSIVolumeDeregistered");
        assert_eq!(batch.events[0].key(), "vol1");
    }
}

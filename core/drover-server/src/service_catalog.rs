//! The native service catalog as a client agent reads it (templates' `nomadService` and
//! `nomadServices`): the registrations of a namespace, all or of one service, derived from
//! the running allocations like every other read of them. A read: any server answers once it
//! caught up with the leader.

use serde::{Deserialize, Serialize};

use crate::ServerError;
use crate::rpc::{Reply, Request};
use crate::server::Server;
use drover_structs::ServiceRegistration;

/// Which registrations a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceQuery {
    pub namespace: String,
    /// One service's; `None` for every service of the namespace.
    pub name: Option<String>,
}

impl Server {
    /// The registrations `query` names, ordered by registration ID (Nomad's state index).
    pub async fn service_registrations(
        &self,
        query: ServiceQuery,
    ) -> Result<Vec<ServiceRegistration>, ServerError> {
        match self.route(Request::Services(query)).await? {
            Reply::Services(list) => Ok(list),
            other => Err(ServerError::Internal(format!(
                "unexpected endpoint reply: {other:?}"
            ))),
        }
    }

    pub(crate) fn service_registrations_here(
        &self,
        query: &ServiceQuery,
    ) -> Vec<ServiceRegistration> {
        let mut list: Vec<ServiceRegistration> = self
            .snapshot()
            .service_registrations(Some(&query.namespace))
            .into_iter()
            .filter(|r| query.name.as_deref().is_none_or(|n| n == r.service_name))
            .collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_travels_as_json_with_or_without_a_name() {
        for q in [
            ServiceQuery {
                namespace: "default".into(),
                name: Some("db".into()),
            },
            ServiceQuery {
                namespace: "prod".into(),
                name: None,
            },
        ] {
            let json = serde_json::to_string(&Request::Services(q.clone())).unwrap();
            match serde_json::from_str::<Request>(&json).unwrap() {
                Request::Services(back) => assert_eq!(back, q),
                other => panic!("{other:?}"),
            }
            assert!(Request::Services(q.clone()).is_read());
            assert!(Request::Services(q).is_client_call());
        }
    }
}

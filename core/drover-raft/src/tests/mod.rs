//! Tests of whole nodes: one voter (the dev agent) and an in-process three-node cluster.

mod cluster;
mod single_node;

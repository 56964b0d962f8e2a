//! The custom resources of the rendered overlays (CloudNativePG Cluster and Database,
//! RabbitmqCluster, KEDA ScaledObject and TriggerAuthentication), which no schema at hand
//! validates: their top-level spec fields (to catch a misspelt one) and the fields set here.
//! Skipped with a printed reason where kubectl is missing.

use std::collections::BTreeMap;

use regex::Regex;
use seckill_deploy_check::{Failures, OVERLAYS, by_name, have, items, kind, name, render, scalar};
use serde_yaml::Value;

const ORDERS_QUEUE: &str = "seckill.orders";

/// The API groups of the custom resources.
const GROUPS: [&str; 3] = ["postgresql.cnpg.io", "rabbitmq.com", "keda.sh"];

/// Real top-level spec fields of each custom resource (a subset of each CRD).
fn spec_fields(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    Some(match (api_version, kind) {
        ("postgresql.cnpg.io/v1", "Cluster") => &[
            "instances",
            "imageName",
            "imageCatalogRef",
            "primaryUpdateStrategy",
            "primaryUpdateMethod",
            "storage",
            "walStorage",
            "bootstrap",
            "postgresql",
            "resources",
            "affinity",
            "monitoring",
            "backup",
            "managed",
            "description",
            "enableSuperuserAccess",
            "superuserSecret",
            "inheritedMetadata",
            "minSyncReplicas",
            "maxSyncReplicas",
            "startDelay",
            "stopDelay",
            "smartShutdownTimeout",
            "switchoverDelay",
            "failoverDelay",
            "topologySpreadConstraints",
            "priorityClassName",
            "logLevel",
            "certificates",
            "externalClusters",
            "replica",
            "env",
            "envFrom",
            "enablePDB",
            "plugins",
            "probes",
            "tablespaces",
            "serviceAccountTemplate",
            "projectedVolumeTemplate",
            "ephemeralVolumeSource",
            "ephemeralVolumesSizeLimit",
            "seccompProfile",
            "nodeMaintenanceWindow",
            "livenessProbeTimeout",
            "imagePullPolicy",
            "imagePullSecrets",
            "postgresGID",
            "postgresUID",
            "replicationSlots",
        ],
        ("postgresql.cnpg.io/v1", "Database") => &[
            "name",
            "owner",
            "cluster",
            "ensure",
            "databaseReclaimPolicy",
            "template",
            "encoding",
            "locale",
            "localeProvider",
            "localeCollate",
            "localeCType",
            "icuLocale",
            "icuRules",
            "builtinLocale",
            "collationVersion",
            "isTemplate",
            "allowConnections",
            "connectionLimit",
            "tablespace",
            "extensions",
            "schemas",
        ],
        ("rabbitmq.com/v1beta1", "RabbitmqCluster") => &[
            "replicas",
            "image",
            "imagePullSecrets",
            "service",
            "persistence",
            "resources",
            "affinity",
            "tolerations",
            "rabbitmq",
            "tls",
            "override",
            "skipPostDeploySteps",
            "terminationGracePeriodSeconds",
            "delayStartSeconds",
            "secretBackend",
        ],
        ("keda.sh/v1alpha1", "ScaledObject") => &[
            "scaleTargetRef",
            "minReplicaCount",
            "maxReplicaCount",
            "idleReplicaCount",
            "pollingInterval",
            "cooldownPeriod",
            "initialCooldownPeriod",
            "advanced",
            "triggers",
            "fallback",
        ],
        ("keda.sh/v1alpha1", "TriggerAuthentication") => &[
            "secretTargetRef",
            "env",
            "podIdentity",
            "hashiCorpVault",
            "azureKeyVault",
            "awsSecretManager",
            "gcpSecretManager",
            "configMapTargetRef",
            "boundServiceAccountToken",
        ],
        _ => return None,
    })
}

fn check_custom_resources(f: &mut Failures, overlay: &str, docs: &[Value]) {
    let quantity = Regex::new(r"^\d+(\.\d+)?([KMGTPE]i?|m)?$").unwrap();
    let ov = format!("overlay {overlay}");
    for d in docs {
        let api = d["apiVersion"].as_str().unwrap_or_default();
        if !GROUPS.contains(&api.split('/').next().unwrap_or_default()) || !api.contains('/') {
            continue;
        }
        let at = format!("{ov}: {}/{}", kind(d), name(d));
        let Some(fields) = spec_fields(api, kind(d)) else {
            f.fail(
                &at,
                format!(
                    "no check for {api} {}: add one to crates/deploy-check/tests/custom_resources.rs",
                    kind(d)
                ),
            );
            continue;
        };
        let mut unknown: Vec<String> = d["spec"]
            .as_mapping()
            .into_iter()
            .flatten()
            .map(|(k, _)| scalar(k))
            .filter(|k| !fields.contains(&k.as_str()))
            .collect();
        unknown.sort();
        if !unknown.is_empty() {
            f.fail(&at, format!("unknown spec fields {unknown:?}"));
        }
    }
    let clusters = by_name(docs, "Cluster");
    if clusters.is_empty() {
        f.fail(&ov, "no CloudNativePG Cluster");
    }
    for (cluster, c) in &clusters {
        let at = format!("{ov}: Cluster/{cluster}");
        let spec = &c["spec"];
        if spec["instances"].as_u64().is_none_or(|n| n < 1) {
            f.fail(&at, "spec.instances must be an integer >= 1");
        }
        if !quantity.is_match(&scalar(&spec["storage"]["size"])) {
            f.fail(&at, "spec.storage.size must be a quantity");
        }
        let initdb = &spec["bootstrap"]["initdb"];
        if initdb["database"].as_str() != Some("seckill_stock")
            || initdb["owner"].as_str().is_none_or(str::is_empty)
        {
            f.fail(&at, "bootstrap.initdb must create seckill_stock with an owner");
        }
        if spec["postgresql"]["parameters"].as_mapping().into_iter().flatten().any(|(_, v)| !v.is_string()) {
            f.fail(&at, "postgresql.parameters values must be strings");
        }
    }
    let databases: BTreeMap<String, &Value> =
        docs.iter().filter(|d| kind(d) == "Database").map(|d| (scalar(&d["spec"]["name"]), d)).collect();
    for d in databases.values() {
        let at = format!("{ov}: Database/{}", name(d));
        match d["spec"]["cluster"]["name"].as_str().and_then(|c| clusters.get(c)) {
            None => f.fail(&at, "spec.cluster.name is not a Cluster of this overlay"),
            Some(c) if d["spec"]["owner"] != c["spec"]["bootstrap"]["initdb"]["owner"] => {
                f.fail(&at, "owner differs from the cluster's application role")
            }
            Some(_) => {}
        }
    }
    if !databases.contains_key("seckill_order") {
        f.fail(&ov, "no CloudNativePG Database seckill_order");
    }
    let rabbits = by_name(docs, "RabbitmqCluster");
    if rabbits.len() != 1 {
        f.fail(&ov, "expected one RabbitmqCluster");
    }
    for (rabbit, r) in &rabbits {
        let at = format!("{ov}: RabbitmqCluster/{rabbit}");
        let spec = &r["spec"];
        if spec["replicas"].as_u64().is_none_or(|n| n % 2 == 0) {
            f.fail(&at, "spec.replicas must be an odd integer (quorum queues need a majority)");
        }
        if !quantity.is_match(&scalar(&spec["persistence"]["storage"])) {
            f.fail(&at, "spec.persistence.storage must be a quantity");
        }
        let config = &spec["rabbitmq"]["additionalConfig"];
        if !config.is_null() && !config.is_string() {
            f.fail(&at, "rabbitmq.additionalConfig must be a string");
        }
    }
    let auths = by_name(docs, "TriggerAuthentication");
    for (auth, t) in &auths {
        let complete = |r: &Value| ["parameter", "name", "key"].iter().all(|k| !scalar(&r[*k]).is_empty());
        if !items(&t["spec"]["secretTargetRef"]).iter().all(complete) {
            f.fail(
                &format!("{ov}: TriggerAuthentication/{auth}"),
                "secretTargetRef entries need parameter, name and key",
            );
        }
    }
    let deployments = by_name(docs, "Deployment");
    let number = Regex::new(r"^\d+(\.\d+)?$").unwrap();
    for (so_name, so) in by_name(docs, "ScaledObject") {
        let at = format!("{ov}: ScaledObject/{so_name}");
        let spec = &so["spec"];
        if !spec["scaleTargetRef"]["name"].as_str().is_some_and(|n| deployments.contains_key(n)) {
            f.fail(&at, "scaleTargetRef is not a Deployment of this overlay");
        }
        let count = |k: &str, default: u64| if spec[k].is_null() { Some(default) } else { spec[k].as_u64() };
        if !count("minReplicaCount", 0)
            .zip(count("maxReplicaCount", 100))
            .is_some_and(|(lo, hi)| 1 <= lo && lo <= hi)
        {
            f.fail(&at, "needs 1 <= minReplicaCount <= maxReplicaCount");
        }
        let triggers = items(&spec["triggers"]);
        let rabbit: Vec<&Value> =
            triggers.iter().filter(|t| t["type"].as_str() == Some("rabbitmq")).collect();
        if rabbit.is_empty() {
            f.fail(&at, "no rabbitmq trigger");
        }
        for t in rabbit {
            let md = &t["metadata"];
            if md["queueName"].as_str() != Some(ORDERS_QUEUE) {
                f.fail(&at, format!("rabbitmq trigger queueName must be {ORDERS_QUEUE}"));
            }
            let mode = md["mode"].as_str().unwrap_or_default();
            if !["QueueLength", "MessageRate"].contains(&mode) || !number.is_match(&scalar(&md["value"])) {
                f.fail(&at, "rabbitmq trigger needs mode QueueLength|MessageRate and a numeric string value");
            }
            if !["amqp", "http", "auto"].contains(&md["protocol"].as_str().unwrap_or("auto")) {
                f.fail(&at, "rabbitmq trigger protocol must be amqp, http or auto");
            }
            let authenticated =
                t["authenticationRef"]["name"].as_str().is_some_and(|a| auths.contains_key(a));
            if !authenticated && md["host"].as_str().is_none_or(str::is_empty) {
                f.fail(&at, "rabbitmq trigger has no host and no TriggerAuthentication of this overlay");
            }
        }
        for t in triggers.iter().filter(|t| t["type"].as_str() == Some("cpu")) {
            if !["Utilization", "AverageValue"].contains(&t["metricType"].as_str().unwrap_or_default()) {
                f.fail(&at, "cpu trigger needs metricType Utilization or AverageValue");
            }
        }
    }
}

#[test]
fn the_custom_resources_have_known_fields_and_sound_values() {
    if !have("kubectl", "it renders deploy/k8s/overlays/*") {
        return;
    }
    let mut f = Failures::default();
    for overlay in OVERLAYS {
        check_custom_resources(&mut f, overlay, &render(overlay));
    }
    f.assert_none();
}

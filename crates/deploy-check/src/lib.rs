//! Deployment checks that need the services' code: `tests/settings.rs` reads every environment
//! a deployment file gives a service (deploy/k8s, deploy/compose.yaml, deploy/docker/Dockerfile)
//! through that service's own settings loader and validation. Nothing to link against here.

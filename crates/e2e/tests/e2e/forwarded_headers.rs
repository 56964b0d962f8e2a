//! The gateway's limits are no looser than the services' behind it: a request with as many
//! headers as the gateway takes (95, one under actix-http's 96, which the gateway and every
//! service run) goes through the real gateway to the real services on every kind of route and
//! is never a service's 431, never a 5xx, and never an ERROR line, nor is a service's 4xx.
//! One over the limit is the client's 431 from the gateway, logged below ERROR.

use std::sync::{Arc, Mutex};

use reqwest::Method;
use seckill_common::telemetry::ClientConnectionErrors;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::helpers::spawn_system;

/// Every ERROR event of the process: target and fields, as the log would show them.
#[derive(Clone, Default)]
struct Errors(Arc<Mutex<Vec<String>>>);

impl<S: Subscriber> Layer<S> for Errors {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() == Level::ERROR {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            self.0.lock().unwrap().push(format!("{}:{}", event.metadata().target(), fields.0));
        }
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

/// `n` filler headers of 64 bytes each.
fn fillers(mut request: reqwest::RequestBuilder, n: usize) -> reqwest::RequestBuilder {
    for i in 0..n {
        request = request.header(format!("x-filler-{i}"), "f".repeat(64));
    }
    request
}

#[tokio::test]
async fn ninety_five_headers_pass_through_to_every_service_and_ninety_seven_are_the_clients_431() {
    // This process's subscriber (nextest runs each test in a process of its own), with the
    // services' own treatment of a client's broken connection.
    let errors = Errors::default();
    let captured =
        tracing_subscriber::registry().with(ClientConnectionErrors).with(errors.clone()).try_init().is_ok();
    let system = spawn_system();
    let admin = system.dev_token(1, "admin").await;
    let user = system.dev_token(2, "user").await;
    let g = system.open_sale(10).await.id;

    // With reqwest's `host`, `accept`, the bearer token and a content type: 95 lines.
    let routes: Vec<(Method, String, Option<&str>)> = vec![
        (Method::GET, "/api/goods".into(), None),
        (Method::GET, format!("/api/goods/{g}"), None),
        (Method::GET, format!("/api/seckill/{g}/state"), None),
        (Method::POST, format!("/api/seckill/{g}/token"), Some(&user)),
        (Method::GET, format!("/api/seckill/{g}/result"), Some(&user)),
        (Method::GET, "/api/orders".into(), Some(&user)),
        (Method::GET, format!("/api/admin/goods/{g}/audit"), Some(&admin)),
        (Method::POST, format!("/api/admin/goods/{g}/repair"), Some(&admin)),
    ];
    for (method, path, token) in routes {
        let mut request =
            system.http.request(method.clone(), system.url(&path)).header("content-type", "application/json");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if method == Method::POST {
            request = request.body("{}");
        }
        let res = fillers(request, 91).send().await.unwrap();
        let status = res.status().as_u16();
        let body = res.text().await.unwrap();
        assert!((200..300).contains(&status), "{method} {path}: {status} {body}");
    }
    // A service's 4xx passes through as it is, the client's error, not the gateway's ERROR.
    let rejected: Vec<(Method, &str, Option<&str>, u16)> = vec![
        (Method::GET, "/api/goods/999999999", None, 404),
        (Method::POST, "/api/admin/goods", Some(&admin), 400),
    ];
    for (method, path, token, expected) in rejected {
        let mut request = system
            .http
            .request(method, system.url(path))
            .header("content-type", "application/json")
            .body("{}");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        assert_eq!(fillers(request, 91).send().await.unwrap().status(), expected, "{path}");
    }
    // The buy itself: a path token, then the order with it, both under 95 headers.
    let res =
        fillers(system.http.post(system.url(&format!("/api/seckill/{g}/token"))).bearer_auth(&user), 92)
            .send()
            .await
            .unwrap();
    let token: serde_json::Value = res.json().await.unwrap();
    let res = fillers(
        system
            .http
            .post(system.url(&format!("/api/seckill/{g}/orders")))
            .bearer_auth(&user)
            .header("x-seckill-token", token["token"].as_str().unwrap()),
        91,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());

    // Over actix-http's 96 at the gateway: its 431, and the service never sees the request.
    let res = fillers(system.http.get(system.url("/api/goods")), 97).send().await.unwrap();
    assert_eq!(res.status(), 431);

    // The services' logs and the gateway's: not one ERROR line for any of it.
    if captured {
        let errors = errors.0.lock().unwrap().clone();
        assert!(errors.is_empty(), "ERROR lines: {errors:#?}");
    } else {
        eprintln!("another subscriber was installed first: the ERROR lines were not checked");
    }
}

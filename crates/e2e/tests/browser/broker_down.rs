//! A buyer who clicks while the order queue is out of seckill-service's reach is told to wait,
//! then to try again, and is served when they do once it is back.

use std::time::Duration;

use seckill_e2e::{Options, spawn_system_with};
use tokio::sync::watch;

use crate::browser::{self, PATIENCE};

/// A TCP link from seckill-service to the broker that the test cuts and mends. Cut, it closes
/// the connections through it and drops new ones at once, as a broker out of reach would.
/// It runs on its own thread and runtime, so it keeps working while the test blocks (the
/// system's shutdown closes its broker connections through it).
struct BrokerLink {
    url: String,
    open: watch::Sender<bool>,
}

impl BrokerLink {
    fn start() -> Self {
        let broker = reqwest::Url::parse(&seckill_testkit::amqp_url()).expect("the test broker's URL");
        let target = (broker.host_str().expect("a broker host").to_owned(), broker.port().unwrap_or(5672));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the link");
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let mut url = broker;
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(listener.local_addr().expect("the link's address").port())).expect("a port");
        let (open, mut state) = watch::channel(true);
        std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
                loop {
                    let mut inbound = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => stream,
                            Err(_) => continue,
                        },
                        // The test is over (the link dropped): everything through it ends.
                        changed = state.changed() => match changed {
                            Ok(()) => continue,
                            Err(_) => return,
                        },
                    };
                    if !*state.borrow() {
                        continue;
                    }
                    let (mut cut, target) = (state.clone(), target.clone());
                    tokio::spawn(async move {
                        let Ok(mut outbound) =
                            tokio::net::TcpStream::connect((target.0.as_str(), target.1)).await
                        else {
                            return;
                        };
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            _ = cut.wait_for(|open| !*open) => {}
                        }
                    });
                }
            });
        });
        Self { url: url.to_string(), open }
    }

    fn cut(&self) {
        self.open.send_replace(false);
    }

    fn mend(&self) {
        self.open.send_replace(true);
    }
}

#[tokio::test]
async fn a_buyer_is_told_to_try_again_while_the_queue_is_out_of_reach() {
    let test = "a_buyer_is_told_to_try_again_while_the_queue_is_out_of_reach";
    let link = BrokerLink::start();
    let options = Options { seckill_amqp_url: Some(link.url.clone()), ..Options::default() };
    let Some((browser, sys)) = browser::start(test, || spawn_system_with(options)).await else { return };
    let sale = sys.open_sale(5).await;
    browser.open(&sys.url(&format!("/sales/{}", sale.id))).await;
    browser.sign_in(91).await;
    browser.wait_until("the button comes alive", || browser.enabled("buy")).await;

    link.cut();
    let ready = format!("{}/readyz", sys.seckill[0].url());
    browser
        .wait_until("seckill-service sees its broker gone", || async {
            sys.http.get(&ready).send().await.is_ok_and(|r| r.status() == 503)
        })
        .await;
    browser.record_texts("status").await;
    browser.click("buy").await;
    // The order call is answered 503 BUSY (its request could not be queued): the page waits as
    // told and tries again by itself, a new path token each time (the refused try spent its
    // own), until it gives up and tells the buyer to try again.
    browser
        .wait_text("status", Duration::from_secs(30), |t| {
            t == "The shop is very busy. Press Buy to try again in a moment."
        })
        .await;
    let seen = browser.recorded_texts("status").await;
    assert!(
        seen.iter().any(|t| t.starts_with("The shop is very busy. Trying again in ")),
        "the buyer was told to wait: {seen:?}"
    );
    assert!(browser.enabled("buy").await, "the button is back for the next try");
    browser.screenshot("try-again").await;
    assert_eq!(sys.active_orders(sale.id).await, (0, 0), "no order from a refused click");

    // The queue is back: the publisher reconnects on its next publish (at most once a second).
    link.mend();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    browser.click("buy").await;
    let said = browser.wait_text("status", PATIENCE, |t| t.starts_with("You got it: order ")).await;
    let order_id = browser.text("order-id").await;
    assert_eq!(said, format!("You got it: order {order_id}"));
    assert_eq!(sys.active_orders(sale.id).await, (1, 1));
    browser.close().await;
}

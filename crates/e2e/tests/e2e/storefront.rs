//! The storefront against the whole system: a sale an admin creates is on the pages at once,
//! and its state follows the sell-out, from seckill-service and then from the gateway itself.

use seckill_common::api::SaleState;

use crate::helpers::spawn_system;

#[tokio::test]
async fn a_new_sale_is_on_the_pages_and_its_state_follows_the_sell_out() {
    let sys = spawn_system();
    let text = |path: String| {
        let req = sys.http.get(sys.url(&path));
        async move {
            let res = req.send().await.unwrap();
            (res.status().as_u16(), res.text().await.unwrap())
        }
    };
    // The list rendered before the sale exists is not what a buyer sees after.
    assert!(text("/".into()).await.1.contains("No sales yet"));

    let sale = sys.open_sale(1).await;
    let (status, list) = text("/".into()).await;
    assert_eq!(status, 200);
    assert!(list.contains(&format!("href=\"/sales/{}\"", sale.id)) && list.contains("flash phone"), "{list}");
    let (status, page) = text(format!("/sales/{}", sale.id)).await;
    assert_eq!(status, 200);
    assert!(page.contains("<h1>flash phone</h1>") && page.contains("1 of 1 left"), "{page}");

    let state = |sys: &seckill_e2e::System| {
        let req = sys.http.get(sys.url(&format!("/api/seckill/{}/state", sale.id)));
        async move { req.send().await.unwrap().json::<SaleState>().await.unwrap() }
    };
    let before = state(&sys).await;
    assert_eq!((before.goods_id, before.start_at, before.end_at), (sale.id, sale.start_at, sale.end_at));
    assert!(!before.sold_out);

    let (first, second) = (sys.dev_token(61, "user").await, sys.dev_token(62, "user").await);
    assert_eq!(sys.buy(&first, sale.id).await.0, 202);
    let (status, body) = sys.buy(&second, sale.id).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");
    assert!(state(&sys).await.sold_out, "the state says sold out after the sell-out");
}

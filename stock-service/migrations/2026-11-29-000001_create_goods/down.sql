DROP TABLE stock_ledger;
DROP TABLE goods;

DROP INDEX orders_active_by_sale;

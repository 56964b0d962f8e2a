DROP INDEX goods_by_end;
DROP INDEX goods_by_start;

DROP TABLE probe;

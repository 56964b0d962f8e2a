//! Validated identifiers: once a handler holds one, it is a positive integer.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};

macro_rules! positive_id {
    ($doc:literal, $name:ident) => {
        #[doc = $doc]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "i64", into = "i64")]
        pub struct $name(i64);

        impl $name {
            /// Accepts positive values only.
            pub fn new(value: i64) -> Option<Self> {
                (value > 0).then_some(Self(value))
            }

            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl TryFrom<i64> for $name {
            type Error = String;
            fn try_from(value: i64) -> Result<Self, Self::Error> {
                Self::new(value).ok_or_else(|| format!("{} must be a positive integer", stringify!($name)))
            }
        }

        impl From<$name> for i64 {
            fn from(id: $name) -> i64 {
                id.0
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(Self::new)
                    .ok_or_else(|| format!("`{s}` is not a positive integer id"))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        // By hand: the derive cannot state that only positive values parse (`try_from`).
        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                    .minimum(Some(1))
                    .description(Some($doc.trim()))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    };
}

positive_id!(" A user, as named by the JWT's `sub`.", UserId);
positive_id!(" A sale's goods.", GoodsId);
positive_id!(" An order row.", OrderId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_positive_integers_parse() {
        assert_eq!("42".parse::<UserId>().unwrap().get(), 42);
        assert!("0".parse::<UserId>().is_err());
        assert!("-3".parse::<GoodsId>().is_err());
        assert!("abc".parse::<GoodsId>().is_err());
        assert!("99999999999999999999".parse::<GoodsId>().is_err());
        assert!(serde_json::from_str::<OrderId>("-1").is_err());
        assert_eq!(serde_json::from_str::<OrderId>("7").unwrap().get(), 7);
    }

    #[test]
    fn the_schema_is_the_positive_integer_serde_writes() {
        let schema = serde_json::to_value(<GoodsId as utoipa::PartialSchema>::schema()).unwrap();
        assert_eq!(schema["type"], "integer");
        assert_eq!(schema["minimum"], 1);
        assert_eq!(schema["description"], "A sale's goods.");
        assert_eq!(<UserId as utoipa::ToSchema>::name(), "UserId");
        assert!(serde_json::to_value(GoodsId::new(3).unwrap()).unwrap().is_i64());
    }
}

//! What a sale may be made of: its name and its times, decided here once for every service
//! that takes them (seckill-service and stock-service check a [`NewGoods`](crate::api::NewGoods)
//! with these before anything is written, and the OpenAPI document states the same rules).
//!
//! A value PostgreSQL cannot store (a NUL in a name, a year before 4713 BC) or a page should not
//! show (a control character, a bidirectional override that turns the rest of a page's line
//! around) is the client's mistake: refused with 400 naming the field, never sent to the
//! database to come back as an error that looks like an outage.

use std::fmt;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

/// The most characters (Unicode scalar values) a sale's name may have, as sent: so at most
/// 800 bytes of UTF-8.
pub const NAME_MAX_CHARS: usize = 200;

/// The characters a name may not hold, as the ranges of a regular-expression class (the syntax
/// JavaScript, Python and Rust's `regex` share): the C0 and C1 controls and DEL (tab and line
/// feed among them: a name is one line); the bidirectional marks, embeddings, overrides and
/// isolates (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which reorder the
/// text around a name on a page; the line and paragraph separators; and the invisible format
/// characters that make two names look the same (zero width space, word joiner, invisible
/// operators, deprecated format controls, byte order mark, interlinear annotation). Zero width
/// joiner and non-joiner, variation selectors and tags stay allowed: emoji and several scripts
/// need them. Lone surrogates never reach here: JSON parsing refuses `"\ud800"`.
macro_rules! forbidden_class {
    () => {
        r"\u0000-\u001F\u007F-\u009F\u061C\u200B\u200E\u200F\u2028-\u202E\u2060-\u206F\uFEFF\uFFF9-\uFFFB"
    };
}

/// The JSON Schema `pattern` of a name (the OpenAPI document's `NewGoods.name`): none of the
/// forbidden characters, and one at least that is not white space. Checked against
/// [`SaleName::parse`] for every character by this module's tests.
pub const NAME_PATTERN: &str =
    concat!("^[^", forbidden_class!(), r"]*[^\s", forbidden_class!(), "][^", forbidden_class!(), "]*$");

/// True for a character a name may not hold (see [`NAME_PATTERN`]).
pub const fn forbidden_in_name(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1F}'
        | '\u{7F}'..='\u{9F}'
        | '\u{61C}'
        | '\u{200B}'
        | '\u{200E}'
        | '\u{200F}'
        | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}'
        | '\u{FEFF}'
        | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// A sale's name: printable text of one line, trimmed, 1 to [`NAME_MAX_CHARS`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleName(String);

/// Why a name was refused; the message starts with the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name must not be empty or only spaces")]
    Empty,
    #[error("name must have at most {NAME_MAX_CHARS} characters, not {0}")]
    TooLong(usize),
    #[error(
        "name must be printable text of one line: character {at} is U+{code:04X} (a control, \
         bidirectional or invisible formatting character)",
        code = u32::from(*.ch)
    )]
    Forbidden { ch: char, at: usize },
}

impl SaleName {
    /// The name as it will be stored: `raw` without its leading and trailing white space. The
    /// length bound applies to `raw` as sent, as the document's `maxLength` does.
    pub fn parse(raw: &str) -> Result<Self, NameError> {
        let chars = raw.chars().count();
        if chars > NAME_MAX_CHARS {
            return Err(NameError::TooLong(chars));
        }
        if let Some((at, ch)) = raw.chars().enumerate().find(|(_, c)| forbidden_in_name(*c)) {
            return Err(NameError::Forbidden { ch, at: at + 1 });
        }
        let name = raw.trim();
        if name.is_empty() {
            return Err(NameError::Empty);
        }
        Ok(Self(name.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SaleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An instant a sale may start or end at: from 1970-01-01T00:00:00Z to the last microsecond of
/// 9999 (UTC). Inside what PostgreSQL's `timestamptz` stores (4713 BC to 294276 AD), and what
/// RFC 3339 writes with its four-digit years, so every answer that shows it is RFC 3339 too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SaleTime(DateTime<Utc>);

/// Why an instant was refused: it lies outside [`SaleTime::EARLIEST`]..=[`SaleTime::LATEST`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be between {} and {}, not {}", rfc3339(SaleTime::EARLIEST), rfc3339(SaleTime::LATEST), rfc3339(*.0))]
pub struct TimeOutOfRange(DateTime<Utc>);

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

impl SaleTime {
    pub const EARLIEST: DateTime<Utc> = DateTime::UNIX_EPOCH;
    pub const LATEST: DateTime<Utc> = match NaiveDate::from_ymd_opt(9999, 12, 31) {
        Some(day) => match day.and_hms_micro_opt(23, 59, 59, 999_999) {
            Some(at) => at.and_utc(),
            None => DateTime::UNIX_EPOCH,
        },
        None => DateTime::UNIX_EPOCH,
    };

    pub fn new(at: DateTime<Utc>) -> Result<Self, TimeOutOfRange> {
        if (Self::EARLIEST..=Self::LATEST).contains(&at) { Ok(Self(at)) } else { Err(TimeOutOfRange(at)) }
    }

    pub fn get(self) -> DateTime<Utc> {
        self.0
    }
}

/// Reads an instant as RFC 3339 asks (a date, `T`, a time, `Z` or an offset of at most
/// ±23:59), for a field named `field`: the error says which field, which serde's own messages
/// do not. The range is [`SaleTime`]'s, checked with the other fields.
pub fn parse_rfc3339(field: &str, raw: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(raw)
        .map(|at| at.with_timezone(&Utc))
        .map_err(|e| format!("{field} must be an RFC 3339 time such as 2030-01-01T09:00:00Z ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_trimmed_printable_text_of_one_line() {
        assert_eq!(SaleName::parse("  Phone X  ").unwrap().as_str(), "Phone X");
        for good in ["Téléphone", "手机 Pro", "👨‍👩‍👧 family pack", "🏴󠁧󠁢󠁳󠁣󠁴󠁿 scarf", "می‌خواهم", "a\u{00A0}b"]
        {
            assert_eq!(SaleName::parse(good).unwrap().as_str(), good);
        }
        assert_eq!(SaleName::parse(""), Err(NameError::Empty));
        assert_eq!(SaleName::parse(" \u{3000}\u{00A0} "), Err(NameError::Empty));
        for (bad, ch, at) in [
            ("nul\0", '\0', 4),
            ("two\nlines", '\n', 4),
            ("tab\there", '\t', 4),
            ("\u{7F}del", '\u{7F}', 1),
            ("c1\u{85}", '\u{85}', 3),
            ("evil\u{202E}gpj.exe", '\u{202E}', 5),
            ("iso\u{2066}late", '\u{2066}', 4),
            ("rlm\u{200F}", '\u{200F}', 4),
            ("zero\u{200B}width", '\u{200B}', 5),
            ("\u{FEFF}bom", '\u{FEFF}', 1),
            ("line\u{2028}sep", '\u{2028}', 5),
        ] {
            assert_eq!(SaleName::parse(bad), Err(NameError::Forbidden { ch, at }), "{bad:?}");
        }
        let message = SaleName::parse("a\u{202E}b").unwrap_err().to_string();
        assert!(message.starts_with("name ") && message.contains("U+202E"), "{message}");
    }

    #[test]
    fn a_name_is_bounded_in_characters_as_sent() {
        let longest = "é".repeat(NAME_MAX_CHARS);
        assert_eq!(SaleName::parse(&longest).unwrap().as_str().len(), 2 * NAME_MAX_CHARS);
        assert_eq!(SaleName::parse(&format!("{longest}x")), Err(NameError::TooLong(NAME_MAX_CHARS + 1)));
        // Four-byte characters: the bound in bytes follows from the one in characters.
        assert!(SaleName::parse(&"😀".repeat(NAME_MAX_CHARS)).is_ok());
        assert_eq!(SaleName::parse(&format!(" {longest}")), Err(NameError::TooLong(NAME_MAX_CHARS + 1)));
    }

    /// The document's pattern and the service's rule agree on every character, alone and
    /// between two letters.
    #[test]
    fn the_documented_pattern_is_the_rule() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        for c in (0..=u32::from(char::MAX)).filter_map(char::from_u32) {
            let alone = c.to_string();
            assert_eq!(
                pattern.is_match(&alone),
                SaleName::parse(&alone).is_ok(),
                "U+{:04X} alone",
                u32::from(c)
            );
            let between = format!("a{c}b");
            assert_eq!(
                pattern.is_match(&between),
                SaleName::parse(&between).is_ok(),
                "U+{:04X}",
                u32::from(c)
            );
        }
    }

    #[test]
    fn sale_times_are_the_years_1970_to_9999() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        assert!(SaleTime::new(at("1970-01-01T00:00:00Z")).is_ok());
        assert!(SaleTime::new(at("9999-12-31T23:59:59.999999Z")).is_ok());
        assert!(SaleTime::new(at("1969-12-31T23:59:59Z")).is_err());
        assert!(SaleTime::new(at("0001-01-01T00:00:00Z")).is_err());
        // 9999 in its own zone, 10000 in UTC.
        let message = SaleTime::new(at("9999-12-31T23:00:00-05:00")).unwrap_err().to_string();
        assert_eq!(
            message,
            "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z, not \
             +10000-01-01T04:00:00Z"
        );
    }

    #[test]
    fn times_are_read_as_rfc_3339_naming_the_field() {
        assert_eq!(
            parse_rfc3339("start_at", "2030-01-01T10:00:00+02:00").unwrap(),
            DateTime::parse_from_rfc3339("2030-01-01T08:00:00Z").unwrap()
        );
        for bad in [
            "-5000-01-01T00:00:00Z",
            "+10000-01-01T00:00:00Z",
            "2030-01-01T00:00:00+99:00",
            "2030-01-01T00:00:00",
            "2030-02-30T00:00:00Z",
            "tomorrow",
            "",
        ] {
            let e = parse_rfc3339("end_at", bad).unwrap_err();
            assert!(e.starts_with("end_at must be an RFC 3339 time"), "{bad}: {e}");
        }
    }
}

//! Hive type names (`decimal(10,2)`, `array<struct<a:int>>`) as Arrow types.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};

/// The Arrow type of a Hive type name, as Athena reads it.
pub fn hive_type(name: &str) -> std::result::Result<DataType, String> {
    let mut parser = TypeParser {
        text: name.trim(),
        at: 0,
        depth: 0,
    };
    let t = parser.parse()?;
    parser.skip_space();
    if parser.at != parser.text.len() {
        return Err(format!(
            "unexpected {:?} after the type",
            &parser.text[parser.at..]
        ));
    }
    Ok(t)
}

/// A recursive-descent reader of Hive type names, nesting bounded.
struct TypeParser<'a> {
    text: &'a str,
    at: usize,
    depth: usize,
}

impl TypeParser<'_> {
    fn skip_space(&mut self) {
        while self.text[self.at..].starts_with(' ') {
            self.at += 1;
        }
    }

    fn word(&mut self) -> String {
        self.skip_space();
        let rest = &self.text[self.at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        self.at += end;
        rest[..end].to_ascii_lowercase()
    }

    fn expect(&mut self, c: char) -> std::result::Result<(), String> {
        self.skip_space();
        if self.text[self.at..].starts_with(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected {c:?} at {:?}", &self.text[self.at..]))
        }
    }

    fn peek(&mut self, c: char) -> bool {
        self.skip_space();
        self.text[self.at..].starts_with(c)
    }

    fn numbers(&mut self) -> std::result::Result<Vec<u32>, String> {
        let mut out = Vec::new();
        if !self.peek('(') {
            return Ok(out);
        }
        self.expect('(')?;
        loop {
            let n = self.word();
            out.push(n.parse().map_err(|_| format!("{n:?} is not a number"))?);
            if self.peek(',') {
                self.expect(',')?;
            } else {
                self.expect(')')?;
                return Ok(out);
            }
        }
    }

    fn parse(&mut self) -> std::result::Result<DataType, String> {
        self.depth += 1;
        if self.depth > 32 {
            return Err("types nested deeper than 32 levels".into());
        }
        let word = self.word();
        let t = match word.as_str() {
            "boolean" => DataType::Boolean,
            "tinyint" => DataType::Int8,
            "smallint" => DataType::Int16,
            "int" | "integer" => DataType::Int32,
            "bigint" => DataType::Int64,
            "float" => DataType::Float32,
            "double" => DataType::Float64,
            "string" | "varchar" | "char" => {
                self.numbers()?;
                DataType::Utf8
            }
            "binary" => DataType::Binary,
            "date" => DataType::Date32,
            "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
            "decimal" | "numeric" => {
                let n = self.numbers()?;
                let (p, s) = match n.as_slice() {
                    [] => (10, 0),
                    [p] => (*p, 0),
                    [p, s] => (*p, *s),
                    _ => return Err("decimal takes a precision and a scale".into()),
                };
                if !(1..=38).contains(&p) || s > p {
                    return Err(format!("decimal({p},{s}) is outside decimal(1..38, 0..p)"));
                }
                DataType::Decimal128(p as u8, s as i8)
            }
            "array" => {
                self.expect('<')?;
                let item = self.parse()?;
                self.expect('>')?;
                DataType::new_list(item, true)
            }
            "map" => {
                self.expect('<')?;
                let key = self.parse()?;
                self.expect(',')?;
                let value = self.parse()?;
                self.expect('>')?;
                DataType::Map(
                    Arc::new(Field::new(
                        "entries",
                        DataType::Struct(Fields::from(vec![
                            Field::new("key", key, false),
                            Field::new("value", value, true),
                        ])),
                        false,
                    )),
                    false,
                )
            }
            "struct" => {
                self.expect('<')?;
                let mut fields = Vec::new();
                loop {
                    let name = self.word();
                    if name.is_empty() {
                        return Err(format!(
                            "expected a field name at {:?}",
                            &self.text[self.at..]
                        ));
                    }
                    self.expect(':')?;
                    fields.push(Field::new(name, self.parse()?, true));
                    if self.peek(',') {
                        self.expect(',')?;
                    } else {
                        self.expect('>')?;
                        break;
                    }
                }
                DataType::Struct(Fields::from(fields))
            }
            "" => return Err(format!("expected a type at {:?}", &self.text[self.at..])),
            other => return Err(format!("{other} is not a type lambdafusion reads")),
        };
        self.depth -= 1;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hive_types_read_as_athena_does() {
        let ok = |name: &str| hive_type(name).unwrap();
        assert_eq!(ok("bigint"), DataType::Int64);
        assert_eq!(ok(" INT "), DataType::Int32);
        assert_eq!(ok("varchar(20)"), DataType::Utf8);
        assert_eq!(ok("decimal(12, 2)"), DataType::Decimal128(12, 2));
        assert_eq!(ok("decimal"), DataType::Decimal128(10, 0));
        assert_eq!(ok("array<int>"), DataType::new_list(DataType::Int32, true));
        let DataType::Struct(fields) = ok("struct<a:int,b:array<string>>") else {
            panic!("a struct")
        };
        assert_eq!(fields.len(), 2);
        assert!(matches!(ok("map<string,bigint>"), DataType::Map(..)));
        for bad in [
            "",
            "long",
            "decimal(40,2)",
            "decimal(2,3)",
            "array<int",
            "struct<>",
            "int int",
            "map<string>",
            &"array<".repeat(1000),
        ] {
            assert!(hive_type(bad).is_err(), "{bad:?}");
        }
    }
}

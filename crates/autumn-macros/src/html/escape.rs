//! HTML escaping of the template's literal text, done at compile time.
//! Matches `maud`'s runtime escaping (`&`, `<`, `>`, `"`).

pub(crate) fn escape_to_string(input: &str, output: &mut String) {
    for c in input.chars() {
        match c {
            '&' => output.push_str("&amp;"),
            '<' => output.push_str("&lt;"),
            '>' => output.push_str("&gt;"),
            '"' => output.push_str("&quot;"),
            _ => output.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape_to_string;

    #[test]
    fn escapes_markup_characters() {
        let mut s = String::new();
        escape_to_string("<a href=\"x\">&é</a>", &mut s);
        assert_eq!(s, "&lt;a href=&quot;x&quot;&gt;&amp;é&lt;/a&gt;");
    }
}

//! Aligned text tables for `ctl` output.

/// Rows under a header, rendered with every column padded to its widest cell.
pub(super) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column titles.
    pub(super) fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells render empty, extra ones are ignored).
    pub(super) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, two spaces between columns, no trailing spaces.
    pub(super) fn render(&self) -> String {
        let n = self.header.len();
        let mut width: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in width.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                line.push_str(cell);
                if i + 1 < n {
                    let pad = w - cell.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let mut t = Table::new(&["ID", "NAME"]);
        t.row(vec!["1".into(), "host-a/eth0".into()]);
        t.row(vec!["1234".into(), "µ".into()]);
        assert_eq!(t.render(), "ID    NAME\n1     host-a/eth0\n1234  µ\n");
    }
}

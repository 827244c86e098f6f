// inspect/xml_check.h: a strict well-formedness check of XML 1.0 text, for the SVG and XHTML-compatible HTML that inspect/svg.h
// and report write. `report` uses it to decide which analyze charts to show (a file that is not a well-formed
// <svg> document is named in a warning rather than shown as a broken image) and to assert that its own page is
// well-formed. It is not what keeps a hostile chart from running script: report embeds charts as images and the
// page forbids script (inspect/report.cpp). The tests hold it to libxml2 (test/xml_lib.h): what it accepts, libxml2
// accepts. xml_error(text) is "" for a well-formed document, else "line L, column C: what is wrong"; with `root`,
// the root element's name and attributes (values as written, references unexpanded).
// Checked: valid UTF-8 and only XML's characters (no control bytes but tab, newline, return); an optional XML
// declaration first; an optional <!DOCTYPE name> without an internal subset; one root element, tags nested (at
// most 256 deep) and matched; names; attributes quoted, not repeated in a tag, without '<'; '&' only in the five
// predefined entities or a character reference to an XML character; no "]]>" in text; comments without "--";
// CDATA sections.
// Does not: validate against a schema or DTD, resolve namespaces, or accept processing instructions other than
// the declaration.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/utf8.h"

namespace xml_check_detail {

struct Checker {
    std::string_view s;
    size_t i = 0;
    std::string err;
    std::string root;
    std::vector<std::pair<std::string, std::string>> root_attrs;
    int depth = 0;
    // Elements nest at most this deep (libxml2's default limit too): the check recurses per level, and a hostile
    // file of millions of open tags must be an error, not a stack overflow.
    static constexpr int kMaxDepth = 256;

    bool fail(const std::string& what) {
        if (err.empty()) {
            long line = 1, col = 1;
            for (size_t k = 0; k < i && k < s.size(); k++) {
                if (s[k] == '\n') line++, col = 1;
                else if (((unsigned char)s[k] & 0xC0) != 0x80) col++;
            }
            err = "line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what;
        }
        return false;
    }
    bool starts(std::string_view p) const { return s.substr(i, p.size()) == p; }
    static bool name_start(unsigned char c) {
        return (c | 32) >= 'a' && (c | 32) <= 'z' ? true : c == '_' || c == ':' || c >= 0x80;
    }
    static bool name_char(unsigned char c) { return name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.'; }
    static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
    void spaces() {
        while (i < s.size() && is_space(s[i])) i++;
    }
    bool name(std::string& out) {
        const size_t a = i;
        if (i >= s.size() || !name_start((unsigned char)s[i])) return fail("expected a name");
        while (i < s.size() && name_char((unsigned char)s[i])) i++;
        out = std::string(s.substr(a, i - a));
        return true;
    }
    // &...; at i: a predefined entity or a character reference to an XML character.
    bool reference() {
        const size_t semi = s.find(';', i);
        if (semi == std::string_view::npos || semi - i > 12) return fail("'&' that starts no entity (write &amp;)");
        const std::string_view ref = s.substr(i + 1, semi - i - 1);
        if (ref == "amp" || ref == "lt" || ref == "gt" || ref == "quot" || ref == "apos") {
            i = semi + 1;
            return true;
        }
        if (ref.size() >= 2 && ref[0] == '#') {
            const bool hex = ref[1] == 'x';
            const std::string digits(ref.substr(hex ? 2 : 1));
            char* end = nullptr;
            const unsigned long cp = digits.empty() ? 0 : std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
            if (!digits.empty() && *end == 0 && digits.find_first_of("+- ") == std::string::npos &&
                (cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
                 (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF))) {
                i = semi + 1;
                return true;
            }
            return fail("character reference to no XML character: &" + std::string(ref) + ";");
        }
        return fail("unknown entity &" + std::string(ref) + "; (XML knows amp, lt, gt, quot, apos)");
    }
    bool text_until_tag() {
        while (i < s.size() && s[i] != '<') {
            if (s[i] == '&') {
                if (!reference()) return false;
            } else if (starts("]]>")) {
                return fail("']]>' in text");
            } else {
                i++;
            }
        }
        return true;
    }
    bool comment() {  // at "<!--"
        i += 4;
        const size_t end = s.find("--", i);
        if (end == std::string_view::npos) return fail("unterminated comment");
        if (end + 2 >= s.size() || s[end + 2] != '>') {
            i = end;
            return fail("'--' inside a comment");
        }
        i = end + 3;
        return true;
    }
    bool element() {  // at '<' + name
        if (depth >= kMaxDepth) return fail("elements nested deeper than " + std::to_string(kMaxDepth) + " levels");
        depth++;
        const bool ok = element_body();
        depth--;
        return ok;
    }
    bool element_body() {
        i++;
        std::string tag;
        if (!name(tag)) return false;
        const bool is_root = root.empty();
        if (is_root) root = tag;
        std::set<std::string> attrs;  // a set: a tag of 100,000 attributes is checked in n log n, not n^2
        for (;;) {
            const size_t before = i;
            spaces();
            if (i >= s.size()) return fail("unterminated tag <" + tag);
            if (starts("/>")) {
                i += 2;
                return true;
            }
            if (s[i] == '>') {
                i++;
                break;
            }
            if (i == before) return fail("expected a space before an attribute of <" + tag + ">");
            std::string a;
            if (!name(a)) return false;
            if (!attrs.insert(a).second) return fail("attribute " + a + " repeated in <" + tag + ">");
            spaces();
            if (i >= s.size() || s[i] != '=')
                return fail("attribute " + a + " without '=' (XML has no bare attributes)");
            i++;
            spaces();
            if (i >= s.size() || (s[i] != '"' && s[i] != '\''))
                return fail("attribute " + a + "'s value is not quoted");
            const char q = s[i++];
            const size_t value = i;
            while (i < s.size() && s[i] != q) {
                if (s[i] == '<') return fail("'<' in the value of attribute " + a);
                if (s[i] == '&') {
                    if (!reference()) return false;
                } else {
                    i++;
                }
            }
            if (i >= s.size()) return fail("unterminated value of attribute " + a);
            if (is_root) root_attrs.push_back({a, std::string(s.substr(value, i - value))});
            i++;
        }
        for (;;) {  // content
            if (!text_until_tag()) return false;
            if (i >= s.size()) return fail("<" + tag + "> is never closed");
            if (starts("</")) {
                i += 2;
                std::string end;
                if (!name(end)) return false;
                if (end != tag) return fail("</" + end + "> closes <" + tag + ">");
                spaces();
                if (i >= s.size() || s[i] != '>') return fail("expected '>' after </" + end);
                i++;
                return true;
            }
            if (starts("<!--")) {
                if (!comment()) return false;
            } else if (starts("<![CDATA[")) {
                const size_t end = s.find("]]>", i);
                if (end == std::string_view::npos) return fail("unterminated CDATA section");
                i = end + 3;
            } else if (starts("<?") || starts("<!")) {
                return fail("a declaration or processing instruction inside an element");
            } else if (!element()) {
                return false;
            }
        }
    }
    bool misc() {  // comments and white space between the prolog's parts and after the root
        for (;;) {
            spaces();
            if (starts("<!--")) {
                if (!comment()) return false;
            } else {
                return true;
            }
        }
    }
    bool document() {
        for (size_t k = 0; k < s.size();) {  // characters first: UTF-8, and XML's character set
            const size_t n = utf8_seq_len((const unsigned char*)s.data(), k, s.size());
            const unsigned char c = (unsigned char)s[k];
            if (n == 0) {
                i = k;
                return fail("invalid UTF-8");
            }
            if (n == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
                i = k;
                return fail("control character " + std::to_string(c) + " (not allowed in XML)");
            }
            if (n == 3 && c == 0xEF && (unsigned char)s[k + 1] == 0xBF && (unsigned char)s[k + 2] >= 0xBE) {
                i = k;
                return fail("U+FFFE or U+FFFF (not XML characters)");
            }
            k += n;
        }
        if (starts("<?xml") && i + 5 < s.size() && is_space(s[i + 5])) {  // not <?xml-stylesheet ...?>, a PI
            const size_t end = s.find("?>", i);
            if (end == std::string_view::npos) return fail("unterminated XML declaration");
            i = end + 2;
        }
        if (!misc()) return false;
        if (starts("<!DOCTYPE")) {
            const size_t end = s.find('>', i);
            if (end == std::string_view::npos) return fail("unterminated DOCTYPE");
            if (s.substr(i, end - i).find('[') != std::string_view::npos) return fail("a DOCTYPE internal subset");
            i = end + 1;
            if (!misc()) return false;
        }
        if (i >= s.size() || s[i] != '<' || i + 1 >= s.size() || !name_start((unsigned char)s[i + 1]))
            return fail("expected the root element");
        if (!element()) return false;
        if (!misc()) return false;
        if (i != s.size()) return fail("content after the root element");
        return true;
    }
};

}  // namespace xml_check_detail

struct XmlRoot {
    std::string name;
    std::vector<std::pair<std::string, std::string>> attrs;
    const std::string* attr(const std::string& n) const {
        for (const auto& a : attrs)
            if (a.first == n) return &a.second;
        return nullptr;
    }
};

// "" when `text` is a well-formed XML document, else where and what the first problem is; *root (when given and
// the document is well-formed): its root element.
inline std::string xml_error(std::string_view text, XmlRoot* root = nullptr) {
    xml_check_detail::Checker c;
    c.s = text;
    c.document();
    if (root && c.err.empty()) root->name = c.root, root->attrs = c.root_attrs;
    return c.err;
}

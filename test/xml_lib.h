// test/xml_lib.h: XML well-formedness by libxml2 (Debian's libxml2-dev, linked into the tests only), the parser the
// tests hold report's pages, the SVG charts and inspect/xml_check.h to. libxml_error(text) is "" for a well-formed,
// namespace-well-formed document, else libxml2's first message with its line. Network access, entity
// substitution and DTD loading stay off (libxml2's defaults, and XML_PARSE_NONET).
#pragma once

#include <libxml/parser.h>
#include <libxml/xmlerror.h>

#include <climits>
#include <string>
#include <string_view>

inline std::string libxml_error(std::string_view text) {
    if (text.size() > (size_t)INT_MAX) return "larger than libxml2 reads from memory";
    xmlParserCtxtPtr ctxt = xmlNewParserCtxt();
    if (!ctxt) return "libxml2: no parser context";
    xmlDocPtr doc = xmlCtxtReadMemory(ctxt, text.data(), (int)text.size(), "text.xml", nullptr,
                                      XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    std::string err;
    if (!doc || !ctxt->wellFormed || !ctxt->nsWellFormed) {
        const xmlError* e = xmlCtxtGetLastError(ctxt);
        err = e && e->message ? e->message : "not well-formed";
        while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
        if (e) err = "line " + std::to_string(e->line) + ": " + err;
    }
    if (doc) xmlFreeDoc(doc);
    xmlFreeParserCtxt(ctxt);
    return err;
}

/* report_doc.h - the night report (report.h's object) as a document for
 * people: Markdown (GET /v1/report?format=md, which `nightshift report`
 * prints) or the HTML page GET /report, the same text either way. One
 * writer turns headings, paragraphs, lists and tables into either syntax, so
 * what the report says is written once.
 *
 * Ownership: both return a new NUL-terminated string the caller frees, or
 * NULL when out of memory. */
#ifndef NIGHTSHIFT_REPORT_DOC_H
#define NIGHTSHIFT_REPORT_DOC_H

#include <cjson/cJSON.h>

/* The report as Markdown. */
char *report_markdown(const cJSON *report);

/* The report as a whole HTML page (the dashboard's styles; the anytime
 * curve drawn by /ui/report.js from the report's JSON, embedded in the
 * page, which reads as it is without scripts). */
char *report_html(const cJSON *report);

#endif

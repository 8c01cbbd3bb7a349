# embed-schema.awk - compile schema/NNN_name.sql files into a C source file.
#
#   awk -f scripts/embed-schema.awk schema/001_init.sql schema/002_x.sql > schema_sql.c
#
# Each file becomes one store_migration_t {NNN, "NNN_name.sql", "text"} of the
# array store_migrations (daemon/store/store.h), in argument order. The version is the
# number before the first underscore; versions must strictly increase. Plain
# POSIX awk (mawk on Debian), no other tools.

function fail(msg) {
    print "embed-schema: " msg > "/dev/stderr"
    failed = 1
    exit 1
}

# One line as a C string literal. Character by character, because awks
# disagree about backslashes in gsub replacements. '?' is escaped so that
# -std=c11 never sees a trigraph.
function c_string(s,    out, i, c) {
    sub(/\r$/, "", s)
    out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "\\" || c == "\"" || c == "?") out = out "\\" c
        else if (c == "\t") out = out "\\t"
        else out = out c
    }
    return "\"" out "\\n\""
}

BEGIN {
    print "/* Generated from schema/NNN_*.sql by scripts/embed-schema.awk; do not edit. */"
    print "#include \"daemon/store/store.h\""
    print ""
    print "const store_migration_t store_migrations[] = {"
}

FNR == 1 {
    if (count > 0) print "    },"
    name = FILENAME
    sub(/.*\//, "", name)
    if (name !~ /^[0-9]+_.*\.sql$/) fail(FILENAME ": the name must be NNN_something.sql")
    version = substr(name, 1, index(name, "_") - 1) + 0
    if (version < 1) fail(FILENAME ": versions start at 1")
    if (count > 0 && version <= last) fail(FILENAME ": version " version " does not follow " last)
    last = version
    count++
    printf "    {%d,\n     \"%s\",\n", version, name
}

{ print "     " c_string($0) }

END {
    if (failed) exit 1
    if (count != ARGC - 1) fail("expected " (ARGC - 1) " files, read " count " (an empty file?)")
    print "    },"
    print "};"
    print ""
    printf "const size_t store_n_migrations = %d;\n", count
}

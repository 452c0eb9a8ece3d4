# Turns the option table of `isoprofd --help` into the troff of
# isoprof.yaml(5)'s OPTIONS section: one .SS per top-level key, one .TP per
# option. The table is one aligned line per option under a header line
# "OPTION TYPE DEFAULT BOUNDS DESCRIPTION"; the columns are cut at the
# header words' positions, since a default or bounds may hold spaces
# ("port 1..65535", '"" or ip:port'). A description that ends in
# "[restart]" names an option SIGHUP does not apply. Fails (exit 1) when
# there is no table, so a changed --help breaks the build, not the page.

function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }

# Text for a troff text line: backslashes escaped, and a line that would
# start with a control character protected.
function esc(s) {
    gsub(/\\/, "\\e", s)
    if (s ~ /^[.']/) s = "\\&" s
    return s
}

# A literal value (a default, a name) in bold: hyphens are minus signs, so
# they copy and paste as typed.
function lit(s) { s = esc(s); gsub(/-/, "\\-", s); return s }

BEGIN { state = 0; n = 0; section = "" }

state == 0 && /^ +OPTION +TYPE +DEFAULT +BOUNDS +DESCRIPTION *$/ {
    c_type = index($0, "TYPE"); c_def = index($0, "DEFAULT")
    c_bounds = index($0, "BOUNDS"); c_desc = index($0, "DESCRIPTION")
    state = 1
    next
}

state == 1 && /^ *$/ { state = 2; next }

state == 1 {
    name = trim(substr($0, 1, c_type - 1))
    type = trim(substr($0, c_type, c_def - c_type))
    def = trim(substr($0, c_def, c_bounds - c_def))
    bounds = trim(substr($0, c_bounds, c_desc - c_bounds))
    desc = trim(substr($0, c_desc))
    if (name == "" || type == "" || def == "" || desc == "") {
        printf "options.awk: cannot read the option line: %s\n", $0 > "/dev/stderr"
        exit 1
    }
    restart = 0
    if (desc ~ / \[restart\]$/) { restart = 1; sub(/ \[restart\]$/, "", desc) }

    top = name; sub(/[.[].*$/, "", top)
    if (top != section) { printf ".SS %s\n", top; section = top }

    printf ".TP\n.B %s\n", lit(name)
    line = "\\fI" esc(type) "\\fP"
    if (def == "(required)") line = line ", required"
    else if (def != "(unset)") line = line ", default \\fB" lit(def) "\\fP"
    if (bounds != "-" && bounds != "") line = line "; " esc(bounds)
    print line "."
    d = toupper(substr(desc, 1, 1)) substr(desc, 2)
    if (d !~ /\.$/) d = d "."
    print esc(d)
    if (restart) print "Takes effect at the next start, not on reload."
    n++
    next
}

END {
    if (n == 0) {
        print "options.awk: no option table in the input" > "/dev/stderr"
        exit 1
    }
}

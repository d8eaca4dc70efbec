/*
 * error.c - the error vocabulary. One X-macro table in datahelix.h generates
 * the enum, the messages and the symbolic names, so they cannot drift apart.
 * Codes that are not in the table (other errnos) fall back to strerror-style
 * text from the C library.
 */
#include "core.h"

#include <string.h>

const char *dh_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define DH_ERR_TEXT(name, value, text)                                                             \
    case (value):                                                                                  \
        return text;
        DH_ERRNO_MAP(DH_ERR_TEXT)
#undef DH_ERR_TEXT
    default:
        break;
    }
    /* Other negated errnos: the C library's text (static in glibc for valid codes). */
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *dh_err_name(int err)
{
    switch (err) {
    case 0:
        return "DH_OK";
#define DH_ERR_NAME(name, value, text)                                                             \
    case (value):                                                                                  \
        return "DH_" #name;
        DH_ERRNO_MAP(DH_ERR_NAME)
#undef DH_ERR_NAME
    default:
        break;
    }
    /* Other negated errnos: their symbolic name (EISDIR, ...), static in glibc. */
    const char *name = err < 0 && err > -4096 ? strerrorname_np(-err) : NULL;
    return name ? name : "DH_EUNKNOWN";
}

const char *dh_version_string(void)
{
#define DH_STR2(x) #x
#define DH_STR(x) DH_STR2(x)
    return DH_STR(DH_VERSION_MAJOR) "." DH_STR(DH_VERSION_MINOR) "." DH_STR(DH_VERSION_PATCH);
}

int dh_version(void)
{
    return DH_VERSION_NUMBER;
}

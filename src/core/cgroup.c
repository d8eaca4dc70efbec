/*
 * cgroup.c - how much memory this process's control groups still allow
 * (core.h: dh__cgroup_room), cgroup v1 and v2 alike.
 *
 * DESIGN: /proc/self/cgroup names the process's group in each hierarchy
 * (v2: "0::/path"; v1: "N:memory,...:/path"); /proc/self/mountinfo says
 * where each hierarchy is mounted (fstype cgroup2, or cgroup with the
 * memory option) and which of its groups the mount shows as its root (a
 * container sees its own group as "/"). A limit holds for a group and all
 * below it, so every level from the process's group up to the mount is
 * read: v2 memory.max and memory.current, v1 memory.limit_in_bytes and
 * memory.usage_in_bytes; v1's "no limit" is a number near 2^63.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NO_LIMIT ((int64_t)1 << 60)

/* The number a file holds (-1: none, or "max"). */
static int64_t read_number(const char *dir, const char *name)
{
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1)
        v = -1;
    fclose(f);
    return v;
}

/* The least room (limit - usage) from dir up to top (dir is top or below it); -1: no limit. */
static int64_t room_up(char *dir, size_t top_len, const char *limit, const char *usage)
{
    int64_t room = -1;
    for (;;) {
        int64_t max = read_number(dir, limit), cur = read_number(dir, usage);
        if (max >= 0 && max < NO_LIMIT) {
            int64_t r = DH_MAX(0, max - DH_MAX(cur, 0));
            room = room < 0 ? r : DH_MIN(room, r);
        }
        char *slash = strrchr(dir, '/');
        if (strlen(dir) <= top_len || !slash || (size_t)(slash - dir) < top_len)
            return room;
        *slash = 0;
    }
}

/* The process's group in the hierarchy whose /proc/self/cgroup line is "ID:CONTROLLERS:PATH"
 * with v2 (ID 0, no controllers) or with memory among the controllers; into out. */
static int group_path(const char *proc_cgroup, int v2, char *out, size_t len)
{
    FILE *f = fopen(proc_cgroup, "r");
    if (!f)
        return -1;
    char line[4096];
    int found = -1;
    while (found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *ctl = c1 + 1;
        int match = v2 ? !strncmp(line, "0:", 2) && !ctl[0] : 0;
        for (char *save = NULL, *t = v2 ? NULL : strtok_r((char *)ctl, ",", &save); t;
             t = strtok_r(NULL, ",", &save))
            match |= !strcmp(t, "memory");
        if (match && strlen(c2 + 1) < len) {
            strcpy(out, c2 + 1);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

int64_t dh__cgroup_room(const char *proc_cgroup, const char *mountinfo)
{
    FILE *f = fopen(mountinfo, "r");
    if (!f)
        return -1;
    int64_t room = -1;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options [optional...] - fstype source super */
        char root[1024], mnt[1024], fstype[64], super[1024] = "";
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", root, mnt) != 2 ||
            sscanf(dash + 3, "%63s %*s %1023s", fstype, super) < 1)
            continue;
        int v2 = !strcmp(fstype, "cgroup2");
        int v1 = !strcmp(fstype, "cgroup") && strstr(super, "memory") &&
                 (strstr(super, ",memory") || !strncmp(super, "memory", 6));
        char group[2048];
        if ((!v1 && !v2) || group_path(proc_cgroup, v2, group, sizeof group))
            continue;
        /* the group relative to what the mount shows: a mount of /a shows /a/b as /b */
        size_t rl = strcmp(root, "/") ? strlen(root) : 0;
        const char *rel = rl && !strncmp(group, root, rl) ? group + rl : group;
        char dir[4096];
        if ((size_t)snprintf(dir, sizeof dir, "%s%s", mnt, strcmp(rel, "/") ? rel : "") >=
            sizeof dir)
            continue;
        int64_t r = room_up(dir, strlen(mnt), v2 ? "memory.max" : "memory.limit_in_bytes",
                            v2 ? "memory.current" : "memory.usage_in_bytes");
        if (r >= 0)
            room = room < 0 ? r : DH_MIN(room, r);
    }
    fclose(f);
    return room;
}
